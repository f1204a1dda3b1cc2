package stage

import "sync"

// slots hands out gitlab-runner's concurrency slots (commands/builds_helper.go
// addBuild): CI_CONCURRENT_ID is the smallest index no other running job of
// the same GitLab runner holds, CI_CONCURRENT_PROJECT_ID the smallest no
// other running job of that runner and the same project holds. A job
// releases both when it ends. The runner is the one the job came through
// (its GitLab server and runner ID); the jobs are this node's.
type slots struct {
	mu   sync.Mutex
	held []*slot
}

type slot struct {
	runner    string
	project   int64
	id, proID int
}

// acquire takes the slots of a job of runner and project and returns them
// with the function that releases them.
func (s *slots) acquire(runner string, project int64) (id, projectID int, release func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ids, pids := map[int]bool{}, map[int]bool{}
	for _, h := range s.held {
		if h.runner != runner {
			continue
		}
		ids[h.id] = true
		if h.project == project {
			pids[h.proID] = true
		}
	}
	n := &slot{runner: runner, project: project}
	for ids[n.id] {
		n.id++
	}
	for pids[n.proID] {
		n.proID++
	}
	s.held = append(s.held, n)
	var once sync.Once
	return n.id, n.proID, func() {
		once.Do(func() {
			s.mu.Lock()
			defer s.mu.Unlock()
			for i, h := range s.held {
				if h == n {
					s.held = append(s.held[:i], s.held[i+1:]...)
					break
				}
			}
		})
	}
}
