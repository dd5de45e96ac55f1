package cli

// Exit codes shared by dolly's commands, so that a script can tell a cast
// that never began from one that ran and failed.
const (
	// ExitOK: every target holds the image and its digest was verified.
	ExitOK = 0
	// ExitFailed: the cast ran, but a target was not verified (a node
	// failed, or the cast was cut short once writing had begun).
	ExitFailed = 1
	// ExitUsage: a mistake on the command line; nothing was done.
	ExitUsage = 2
	// ExitNotStarted: the command could not start its work (an unreadable
	// image or key, an address in use, no server to join, a target
	// refused, the operator said no): nothing was written.
	ExitNotStarted = 3
)

// ExitCodes is the help text's paragraph on exit codes.
const ExitCodes = `Exit codes: 0 every target verified; 1 the cast ran but not every target
was verified; 2 a usage error; 3 could not start (nothing was written).
`
