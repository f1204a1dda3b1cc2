// Package relay is vk-gitlab, the relay daemon: it holds the GitLab runner
// tokens, reserves room on the hub before asking GitLab for a job, never
// takes a job it has no room for, and never loses one it took.
//
// [Config] is vk-gitlab.toml (strict TOML, `version = 1`; see
// docs/relay.md for every key and default); [LoadConfig] reads it and the
// runners' tokens; [New] and [Server.Run] are `vk-gitlab run` ([Run] does
// both). The pieces:
//
//   - relay/state: the per-runner state files (RELAY-05..09, AUTH-16);
//   - relay/loop: the request loops and the job handler (ARB-02, ARB-25..38,
//     RELAY-10..18, GL-08..17);
//   - relay/gitlab and relay/translate: GitLab's runner API and the job
//     translation;
//   - relay/hubsession and hubclient: the hub session and client API.
//
// Choices where the spec is silent (DECISIONS 10), also in docs/relay.md:
//
//   - concurrent = 0 in the file means the default (10); limit 0 means no
//     limit beyond concurrent; shutdown_timeout is in seconds (3600).
//   - A verify that fails for another reason than a refusal (GitLab down)
//     does not mark the token refused; the job requests tell.
//   - [hub] url, when set, must equal the enrolled hub's URL; [hub] urls,
//     when set, must list it (docs/ha.md: a relay that knows every hub
//     instance).
package relay
