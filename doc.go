// Package capstan is capstan's vocabulary: the words every other package
// uses for what is known about an effect (Outcome) and for what a reconciler
// concluded about one (Verdict). Each word has one Go name and one string;
// the ledger's rows, activity results, task results, metric labels and the
// starter's columns all print it as it is spelled here.
//
// The package imports only the standard library, so that every package of
// capstan — the ledger, the model providers, the tools, the workflow — can
// use it without linking anything else. Strings an older release wrote
// (ledger rows, recorded histories, task results) still decode: UnmarshalText
// and ParseOutcome accept them as aliases of the word they meant; the
// CHANGELOG.md lists them.
//
// # As a library
//
// Capstan's public API is this package and three others: package tool (a
// tool of your own, with an operation id, a lookup and the policy's view
// of it), package worker (a worker running your tools, or capstan's
// workflow and activities on a Temporal worker of yours) and package
// capstantest (what your tests need). Everything else is internal. The API
// is v0: names may change in any release until 1.0, and CHANGELOG.md says
// how; the words of this package — outcomes, verdicts, classes — and what
// an operation id means will not. docs/library.md is the guide.
package capstan
