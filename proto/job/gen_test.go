package job

import (
	"pgregory.net/rapid"
)

// Generators for property tests. Secrets are drawn from their own alphabet
// ("SECRET" + upper-case letters) and nothing else can contain "SECRET":
// other strings use lower-case letters, digits and punctuation.
var (
	genPlain  = rapid.StringMatching(`[a-z0-9 ./:_-]{0,12}`)
	genSecret = rapid.StringMatching(`SECRET[A-Z]{4,10}`)
	genStrs   = rapid.SliceOfN(genPlain, 0, 3)
)

func genVariable(t *rapid.T, secretsOnly bool) Variable {
	v := Variable{
		Key:    rapid.StringMatching(`[A-Z_]{1,7}`).Draw(t, "key"),
		Public: rapid.Bool().Draw(t, "public"),
		File:   rapid.Bool().Draw(t, "file"),
		Masked: rapid.Bool().Draw(t, "masked"),
		Raw:    rapid.Bool().Draw(t, "raw"),
	}
	if v.Secret() {
		v.Value = genSecret.Draw(t, "secret")
	} else {
		v.Value = genPlain.Draw(t, "value")
	}
	return v
}

func genVariables(t *rapid.T) []Variable {
	n := rapid.IntRange(0, 4).Draw(t, "nvars")
	if n == 0 {
		return nil
	}
	out := make([]Variable, n)
	for i := range out {
		out[i] = genVariable(t, false)
	}
	return out
}

func nilIfEmpty[T any](s []T) []T {
	if len(s) == 0 {
		return nil
	}
	return s
}

func genImage(t *rapid.T) Image {
	var ports []Port
	for range rapid.IntRange(0, 2).Draw(t, "nports") {
		ports = append(ports, Port{Number: rapid.IntRange(1, 65535).Draw(t, "port"), Protocol: genPlain.Draw(t, "proto"), Name: genPlain.Draw(t, "pname")})
	}
	return Image{
		Name: genPlain.Draw(t, "image"), Alias: genPlain.Draw(t, "alias"),
		Command: nilIfEmpty(genStrs.Draw(t, "cmd")), Entrypoint: nilIfEmpty(genStrs.Draw(t, "ep")),
		Ports: ports, Variables: genVariables(t), PullPolicy: nilIfEmpty(genStrs.Draw(t, "pp")),
		Platform: genPlain.Draw(t, "platform"), User: genPlain.Draw(t, "user"),
	}
}

// genCiJob draws a CiJob with every field possibly set.
var genCiJob = rapid.Custom(func(t *rapid.T) *CiJob {
	j := &CiJob{
		Job: JobInfo{
			ID: rapid.Int64().Draw(t, "id"), Name: genPlain.Draw(t, "name"), Stage: genPlain.Draw(t, "stage"),
			PipelineID: rapid.Int64().Draw(t, "pid"), ProjectID: rapid.Int64().Draw(t, "proj"),
			ProjectName: genPlain.Draw(t, "pname"), ProjectPath: genPlain.Draw(t, "ppath"),
			NamespaceID: rapid.Int64().Draw(t, "ns"), RootNamespaceID: rapid.Int64().Draw(t, "rns"),
			UserID: rapid.Int64().Draw(t, "uid"), RunnerID: rapid.Int64().Draw(t, "rid"),
		},
		Token: genSecret.Draw(t, "token"),
		Sources: Sources{
			RepoURL: "https://gitlab.example.com/" + rapid.StringMatching(`[a-z]{1,8}/[a-z]{1,8}`).Draw(t, "path") + ".git",
			Ref:     genPlain.Draw(t, "ref"), SHA: genPlain.Draw(t, "sha"), BeforeSHA: genPlain.Draw(t, "before"),
			RefType: genPlain.Draw(t, "reftype"), RepoObjectFormat: genPlain.Draw(t, "fmt"),
			Refspecs: nilIfEmpty(genStrs.Draw(t, "refspecs")), Depth: rapid.IntRange(0, 1000).Draw(t, "depth"),
			AllowFetch: rapid.Bool().Draw(t, "fetch"),
		},
		TimeoutSecs: rapid.Int64Range(1, 1<<40).Draw(t, "timeout"),
		Variables:   genVariables(t),
		ServerURL:   "https://gitlab.example.com",
		ServerCAPEM: genPlain.Draw(t, "ca"),
		Trace: TraceSettings{
			Sections: rapid.Bool().Draw(t, "sections"), TokenMaskPrefixes: nilIfEmpty(genStrs.Draw(t, "prefixes")),
			LimitBytes: rapid.Int64Range(1, 1<<40).Draw(t, "limit"),
		},
	}
	if rapid.Bool().Draw(t, "hasprot") {
		p := rapid.Bool().Draw(t, "prot")
		j.Sources.Protected = &p
	}
	for range rapid.IntRange(0, 3).Draw(t, "nsteps") {
		j.Steps = append(j.Steps, Step{Name: genPlain.Draw(t, "sname"), Script: nilIfEmpty(genStrs.Draw(t, "script")),
			TimeoutSecs: rapid.Int64Range(0, 1<<20).Draw(t, "st"), When: genPlain.Draw(t, "when"), AllowFailure: rapid.Bool().Draw(t, "af")})
	}
	if rapid.Bool().Draw(t, "hasimage") {
		im := genImage(t)
		j.Image = &im
	}
	for range rapid.IntRange(0, 2).Draw(t, "nsvc") {
		j.Services = append(j.Services, genImage(t))
	}
	for range rapid.IntRange(0, 2).Draw(t, "nart") {
		j.Artifacts = append(j.Artifacts, Artifact{Name: genPlain.Draw(t, "an"), Untracked: rapid.Bool().Draw(t, "au"),
			Paths: nilIfEmpty(genStrs.Draw(t, "ap")), Exclude: nilIfEmpty(genStrs.Draw(t, "ax")), When: genPlain.Draw(t, "aw"),
			ArtifactType: genPlain.Draw(t, "at"), ArtifactFormat: genPlain.Draw(t, "af"), ExpireIn: genPlain.Draw(t, "ae")})
	}
	for range rapid.IntRange(0, 2).Draw(t, "ncache") {
		j.Caches = append(j.Caches, Cache{Key: genPlain.Draw(t, "ck"), Untracked: rapid.Bool().Draw(t, "cu"),
			Policy: genPlain.Draw(t, "cp"), Paths: nilIfEmpty(genStrs.Draw(t, "cpaths")), When: genPlain.Draw(t, "cw"),
			FallbackKeys: nilIfEmpty(genStrs.Draw(t, "cfk"))})
	}
	for range rapid.IntRange(0, 2).Draw(t, "ncred") {
		j.RegistryCredentials = append(j.RegistryCredentials, RegistryCredential{URL: genPlain.Draw(t, "ru"),
			Username: genPlain.Draw(t, "rn"), Password: genSecret.Draw(t, "rp")})
	}
	for range rapid.IntRange(0, 2).Draw(t, "ndep") {
		d := Dependency{ID: rapid.Int64().Draw(t, "did"), Token: genSecret.Draw(t, "dt"), Name: genPlain.Draw(t, "dn")}
		if rapid.Bool().Draw(t, "daf") {
			d.ArtifactsFile = &ArtifactsFile{Filename: genPlain.Draw(t, "df"), Size: rapid.Int64Range(0, 1<<40).Draw(t, "ds")}
		}
		j.Dependencies = append(j.Dependencies, d)
	}
	for range rapid.IntRange(0, 2).Draw(t, "nhook") {
		j.Hooks = append(j.Hooks, Hook{Name: genPlain.Draw(t, "hn"), Script: nilIfEmpty(genStrs.Draw(t, "hs"))})
	}
	return j
})
