package journal

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"testing"
)

const crashEnv = "VK_JOURNAL_CRASH_DIR"

// TestCrashWriter is the child of TestKilledWriterLosesNothingAnswered: it
// accepts jobs forever, printing each ID once Accept returned (the moment the
// node would answer accepted).
func TestCrashWriter(t *testing.T) {
	dir := os.Getenv(crashEnv)
	if dir == "" {
		t.Skip("helper process for TestKilledWriterLosesNothingAnswered")
	}
	j, err := Open(dir, nil)
	if err != nil {
		fmt.Println("open:", err)
		os.Exit(2)
	}
	w := bufio.NewWriter(os.Stdout)
	for i := 0; ; i++ {
		if _, _, err := j.Accept(strconv.Itoa(i), "", make([]byte, 1000+i%3000)); err != nil {
			fmt.Println("accept:", err)
			os.Exit(2)
		}
		fmt.Fprintln(w, i)
		w.Flush()
	}
}

// A node killed mid-write (SIGKILL, no chance to clean up) loses no start it
// answered accepted, and reopens its journal cleanly.
// spec: NODE-06
func TestKilledWriterLosesNothingAnswered(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns a process")
	}
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^TestCrashWriter$", "-test.count=1")
	cmd.Env = append(os.Environ(), crashEnv+"="+dir)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(out)
	last := -1
	for sc.Scan() && last < 300 {
		n, err := strconv.Atoi(sc.Text())
		if err != nil {
			cmd.Process.Kill()
			cmd.Wait()
			t.Fatalf("child: %s", sc.Text())
		}
		last = n
	}
	cmd.Process.Kill()
	cmd.Wait()
	if last < 300 {
		t.Fatalf("child stopped after %d accepts", last)
	}
	j := open(t, dir)
	got := j.Unfinished()
	if len(got) < last+1 {
		t.Fatalf("journal holds %d jobs, %d were answered accepted", len(got), last+1)
	}
	for i, e := range got {
		if e.Job != strconv.Itoa(i) {
			t.Fatalf("job %d is %q: a hole in the journal", i, e.Job)
		}
	}
	if _, _, err := j.Accept("after", "", nil); err != nil {
		t.Fatal(err)
	}
}
