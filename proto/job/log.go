package job

import "log/slog"

// LogValue makes a logged CiJob show only what identifies it (job and
// project IDs, project path, ref, sha), never a secret (STYLE C14).
func (j *CiJob) LogValue() slog.Value {
	if j == nil {
		return slog.StringValue("<nil>")
	}
	return slog.GroupValue(
		slog.Int64("gitlab_job", j.Job.ID),
		slog.Int64("project_id", j.Job.ProjectID),
		slog.String("project_path", j.Job.ProjectPath),
		slog.String("ref", j.Sources.Ref),
		slog.String("sha", j.Sources.SHA),
	)
}

// LogValue logs a JobSpec as its kind and its payload's LogValue.
func (s JobSpec) LogValue() slog.Value {
	attrs := []slog.Attr{slog.String("kind", string(s.Kind))}
	if s.GitLabCI != nil {
		attrs = append(attrs, slog.Any("gitlab_ci", s.GitLabCI))
	}
	return slog.GroupValue(attrs...)
}
