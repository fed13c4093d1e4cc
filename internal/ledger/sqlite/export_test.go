package sqlite

// WithoutWriterLock returns opts with the writers' lock left out, as on
// systems without flock(2), for tests and benchmarks to compare.
func WithoutWriterLock(opts Options) Options {
	opts.noWriterLock = true
	return opts
}
