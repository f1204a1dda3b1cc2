package admin

import (
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/vk-ci/vk/hub/pki"
	"github.com/vk-ci/vk/hub/store"
)

// Commands returns vk-hub's operator commands — token, relays, nodes,
// capacity-policy, projects — for the caller to add to its root command.
// socket returns the admin socket's path when a command runs (so it can
// follow a --state-dir flag parsed by then). Every command talks to the
// running hub over that socket only. Output goes to the command's
// OutOrStdout (tables, the token) and ErrOrStderr (notes).
func Commands(socket func() string) []*cobra.Command {
	cl := func() *Client { return Dial(socket()) }
	return []*cobra.Command{tokenCmd(cl), relaysCmd(cl), nodesCmd(cl), policyCmd(cl), projectsCmd(cl), queueCmd(cl)}
}

// group is a command that only holds subcommands: without arguments it
// prints its help; an unknown subcommand is an error (exit status 1), not
// its help with status 0.
func group(use, short string) *cobra.Command {
	return &cobra.Command{Use: use, Short: short, Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() }}
}

func queueCmd(cl func() *Client) *cobra.Command {
	var asJSON bool
	c := &cobra.Command{
		Use:   "queue [--json]",
		Short: "list what waits for room (reservation tickets, then queued jobs) and why",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			q, err := cl().Queue(cmd.Context())
			if err != nil {
				return err
			}
			if asJSON {
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				return enc.Encode(q)
			}
			return writeQueue(cmd.OutOrStdout(), q)
		},
	}
	c.Flags().BoolVar(&asJSON, "json", false, "print JSON (one array) instead of a table")
	return c
}

func tokenCmd(cl func() *Client) *cobra.Command {
	root := group("token", "enrolment tokens")
	var (
		kind string
		ttl  time.Duration
	)
	create := &cobra.Command{
		Use:   "create --kind gitlab|node [--ttl 24h]",
		Short: "mint a one-time enrolment token (printed alone on stdout)",
		Long: "Mint a one-time token that enrols one relay (--kind gitlab) or node (--kind node).\n" +
			"The token alone goes to stdout, so it can be piped:\n\n" +
			"  vk-hub token create --kind gitlab | vk-gitlab join https://hub.example.com:8443 --token - --ca ca.pem",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if kind != "gitlab" && kind != "node" {
				return fmt.Errorf("--kind must be gitlab or node, not %q", kind)
			}
			t, err := cl().CreateToken(cmd.Context(), kind, ttl)
			if err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout(), t.Token)
			e := cmd.ErrOrStderr()
			fmt.Fprintf(e, "one-time %s token, valid until %s\n", t.Kind, t.Expires.UTC().Format(time.RFC3339))
			if t.CAFingerprint != "" {
				fmt.Fprintf(e, "hub CA fingerprint (SHA-256): %s\n", pki.FormatFingerprint(t.CAFingerprint))
			}
			return nil
		},
	}
	create.Flags().StringVar(&kind, "kind", "", "what the token enrols: gitlab (a relay) or node")
	create.Flags().DurationVar(&ttl, "ttl", 0, "how long the token stays valid (default 24h, at most 168h)")
	root.AddCommand(create)
	return root
}

func relaysCmd(cl func() *Client) *cobra.Command {
	root := group("relays", "enrolled relays (vk-gitlab)")
	root.AddCommand(&cobra.Command{
		Use: "list", Short: "list enrolled relays, removed ones included", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			rs, err := cl().Relays(cmd.Context())
			if err != nil {
				return err
			}
			return writeRelays(cmd.OutOrStdout(), rs)
		},
	}, &cobra.Command{
		Use: "remove <id>", Short: "remove a relay: its key is refused from now on", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := cl().RemoveRelay(cmd.Context(), args[0]); err != nil {
				return err
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "relay %s removed\n", args[0])
			return nil
		},
	})
	root.AddCommand(releaseCmds(cl)...)
	return root
}

func nodesCmd(cl func() *Client) *cobra.Command {
	root := group("nodes", "nodes: list, pools, ceiling, drain, undrain, remove")
	setDrain := func(cmd *cobra.Command, id string, on bool) error {
		if err := cl().Drain(cmd.Context(), id, on); err != nil {
			return err
		}
		verb := "draining"
		if !on {
			verb = "no longer draining"
		}
		fmt.Fprintf(cmd.ErrOrStderr(), "node %s %s\n", id, verb)
		return nil
	}
	var undo bool
	drain := &cobra.Command{
		Use: "drain <id>", Short: "drain a node: no new offers, held reservations lapse, running jobs finish", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error { return setDrain(cmd, args[0], !undo) },
	}
	drain.Flags().BoolVar(&undo, "undo", false, "end the drain (as nodes undrain)")
	undrain := &cobra.Command{
		Use: "undrain <id>", Short: "end a drain: the node takes new work again", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error { return setDrain(cmd, args[0], false) },
	}
	root.AddCommand(&cobra.Command{
		Use: "list", Short: "list nodes with their state, pools and load", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ns, err := cl().Nodes(cmd.Context())
			if err != nil {
				return err
			}
			return writeNodes(cmd.OutOrStdout(), ns)
		},
	}, &cobra.Command{
		Use: "pools <id> <a,b>", Short: `set a node's pools ("" for none)`, Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			var pools []string
			for p := range strings.SplitSeq(args[1], ",") {
				if p = strings.TrimSpace(p); p != "" {
					pools = append(pools, p)
				}
			}
			if err := cl().SetPools(cmd.Context(), args[0], pools); err != nil {
				return err
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "node %s pools: %s\n", args[0], cmp.Or(strings.Join(pools, ","), "-"))
			return nil
		},
	}, &cobra.Command{
		Use: "ceiling <id> <n|none>", Short: "set a node's concurrency ceiling", Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			n := NoCeiling
			if args[1] != "none" {
				v, err := strconv.Atoi(args[1])
				if err != nil || v < 0 {
					return fmt.Errorf("ceiling %q: want a number >= 0 or none", args[1])
				}
				n = v
			}
			if err := cl().SetCeiling(cmd.Context(), args[0], n); err != nil {
				return err
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "node %s ceiling: %s\n", args[0], CeilingText(n))
			return nil
		},
	}, drain, undrain, &cobra.Command{
		Use:   "remove <id>",
		Short: "remove a node that will not come back: its key is refused, its jobs end lost",
		Long: "Remove a node that will never come back (a machine retired or rebuilt): the hub refuses its key\n" +
			"from now on, ends its session, ends its reservations, ends its jobs lost and drops it from the\n" +
			"node list. A rebuilt machine joins again with a new token.",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := cl().RemoveNode(cmd.Context(), args[0]); err != nil {
				return err
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "node %s removed\n", args[0])
			return nil
		},
	})
	return root
}

func policyCmd(cl func() *Client) *cobra.Command {
	root := group("capacity-policy", "the capacity policy: tenants, headroom, placement rules (docs/capacity-policy.md)")
	root.AddCommand(&cobra.Command{
		Use: "get", Short: "print the policy in force as a policy file", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			b, err := cl().Policy(cmd.Context())
			if err != nil {
				return err
			}
			_, err = cmd.OutOrStdout().Write(b)
			return err
		},
	}, &cobra.Command{
		Use: "set FILE", Short: "validate FILE (- for stdin) and make it the policy", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var (
				b   []byte
				err error
			)
			if args[0] == "-" {
				b, err = io.ReadAll(cmd.InOrStdin())
			} else {
				b, err = os.ReadFile(args[0])
			}
			if err != nil {
				return err
			}
			p, err := DecodePolicy(args[0], b)
			if err != nil {
				return err
			}
			if err := cl().SetPolicy(cmd.Context(), b); err != nil {
				return err
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "capacity policy set: %d headroom entries, %d tenants\n", len(p.Headroom), len(p.Tenants))
			// A relay ID no enrolment has is most likely a typo: its
			// runners fall to the default tenant. Warn, do not refuse (a
			// policy may name a relay before it joins).
			if rs, err := cl().Relays(cmd.Context()); err == nil {
				for _, w := range UnknownRelays(p, rs) {
					fmt.Fprintln(cmd.ErrOrStderr(), "warning: "+w)
				}
			}
			return nil
		},
	})
	return root
}

func projectsCmd(cl func() *Client) *cobra.Command {
	root := group("projects", "approve or reject GitLab projects and servers")
	decide := func(state store.ApprovalState) *cobra.Command {
		verb := "approve"
		if state == store.ApprovalRejected {
			verb = "reject"
		}
		var unseen bool
		c := &cobra.Command{
			Use:   verb + " <instance> <project-id|server>",
			Short: verb + " a project (or with \"server\" the GitLab server itself)",
			Long: verb + " a project of a GitLab server, or with \"server\" the server itself. <instance> is the\n" +
				"host[:port] of the server's URL, as vk-hub projects list shows it (a URL is read as its host).\n" +
				"A server the hub has not seen (no relay of it connected yet) is refused as a likely typo\n" +
				"unless --unseen says the decision is meant ahead of its first relay.",
			Args: cobra.ExactArgs(2),
			RunE: func(cmd *cobra.Command, args []string) error {
				proj, err := parseProject(args[1])
				if err != nil {
					return err
				}
				inst := store.InstanceKey(args[0])
				if inst == "" {
					return fmt.Errorf("instance %q: want the host[:port] of a GitLab server, as vk-hub projects list shows it", args[0])
				}
				if !unseen {
					as, err := cl().Projects(cmd.Context())
					if err != nil {
						return err
					}
					if !slices.ContainsFunc(as, func(a store.Approval) bool { return a.Instance == inst }) {
						return fmt.Errorf("%w: GitLab server %s: the hub has not seen it (vk-hub projects list shows the servers it has); "+
							"check the spelling, or pass --unseen to decide ahead of its first relay", ErrNotFound, inst)
					}
				}
				if err := cl().SetApproval(cmd.Context(), inst, proj, state); err != nil {
					return err
				}
				fmt.Fprintf(cmd.ErrOrStderr(), "%s %s: %s\n", inst, args[1], state)
				return nil
			},
		}
		c.Flags().BoolVar(&unseen, "unseen", false, "decide on a server the hub has not seen yet")
		return c
	}
	root.AddCommand(&cobra.Command{
		Use: "list", Short: "list projects and servers with their approval state", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			as, err := cl().Projects(cmd.Context())
			if err != nil {
				return err
			}
			return writeProjects(cmd.OutOrStdout(), as)
		},
	}, decide(store.ApprovalApproved), decide(store.ApprovalRejected))
	return root
}

func table(w io.Writer) *tabwriter.Writer { return tabwriter.NewWriter(w, 0, 0, 2, ' ', 0) }

func writeRelays(w io.Writer, rs []Relay) error {
	t := table(w)
	fmt.Fprintln(t, "ID\tNAME\tENROLLED\tSTATE\tRELEASE")
	for _, r := range rs {
		state := "enrolled"
		if r.Removed {
			state = "removed " + stamp(r.RemovedAt)
		}
		fmt.Fprintf(t, "%s\t%s\t%s\t%s\t%s\n", r.ID, cmp.Or(r.Name, "-"), stamp(r.Created), state, cmp.Or(r.Release, "-"))
	}
	return t.Flush()
}

func writeNodes(w io.Writer, ns []Node) error {
	t := table(w)
	fmt.Fprintln(t, "ID\tNAME\tSTATE\tPOOLS\tLABELS\tCEILING\tJOBS\tRESV\tCAPACITY\tLAST SEEN")
	for _, n := range ns {
		ceiling := CeilingText(n.Ceiling)
		if n.MaxConcurrency > 0 {
			ceiling += "/" + strconv.Itoa(n.MaxConcurrency)
		}
		capacity := "-"
		if n.Capacity.CPUs > 0 {
			capacity = fmt.Sprintf("%dcpu %s %s", n.Capacity.CPUs, n.Capacity.Mem, n.Capacity.Disk)
		}
		fmt.Fprintf(t, "%s\t%s\t%s\t%s\t%s\t%s\t%d\t%d\t%s\t%s\n", n.ID, cmp.Or(n.Name, "-"), cmp.Or(n.State, "-"),
			cmp.Or(strings.Join(n.Pools, ","), "-"), cmp.Or(strings.Join(n.Labels, ","), "-"), ceiling, n.Jobs, n.Reservations,
			capacity, stamp(n.LastSeen))
	}
	return t.Flush()
}

func writeQueue(w io.Writer, q []Waiting) error {
	t := table(w)
	fmt.Fprintln(t, "KIND\tID\tCLASS\tTENANT\tRELAY/RUNNER\tPROJECT\tPLACEMENT\tWAITED\tPOSITION\tEST. WAIT\tREASON")
	for _, e := range q {
		proj := "-"
		if e.Project != 0 {
			proj = e.Instance + "/" + strconv.FormatInt(e.Project, 10)
		}
		who := "-"
		if e.Relay != "" || e.Runner != "" {
			who = cmp.Or(e.Relay, "-") + "/" + cmp.Or(e.Runner, "-")
		}
		fmt.Fprintf(t, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", e.Kind, e.ID, cmp.Or(e.Class, "-"), cmp.Or(e.Tenant, "-"), who, proj,
			cmp.Or(e.Placement, "-"), waited(e), e.PositionText(), e.EstimateText(), cmp.Or(e.Reason, "-"))
	}
	if err := t.Flush(); err != nil {
		return err
	}
	idle := 0
	for _, e := range q {
		if e.Idle {
			idle++
		}
	}
	if idle == 0 {
		_, err := fmt.Fprintf(w, "%d waiting\n", len(q))
		return err
	}
	// A backed-off runner's standing request is no backlog: say so.
	_, err := fmt.Fprintf(w, "%d waiting, %d of them runners' standing requests while GitLab has no job for them (backed off): no work waits behind those\n",
		len(q), idle)
	return err
}

func writeProjects(w io.Writer, as []store.Approval) error {
	t := table(w)
	fmt.Fprintln(t, "INSTANCE\tPROJECT\tPATH\tSTATE\tBY\tUPDATED")
	for _, a := range as {
		proj := strconv.FormatInt(a.Project, 10)
		if a.Project == 0 {
			proj = "server"
		}
		fmt.Fprintf(t, "%s\t%s\t%s\t%s\t%s\t%s\n", a.Instance, proj, cmp.Or(a.Path, "-"), a.State, cmp.Or(a.By, "-"), stamp(a.Updated))
	}
	return t.Flush()
}

// waited is how long a queue entry has waited, "-" when unknown.
func waited(e Waiting) string {
	if e.WaitedSecs <= 0 && e.Since.IsZero() {
		return "-"
	}
	return (time.Duration(e.WaitedSecs) * time.Second).String()
}

func stamp(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}
