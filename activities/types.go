package activities

import (
	"github.com/capstanhq/capstan/internal/contract"
)

// The activities' inputs and results, the details their errors carry and
// the types of those errors are the contract between the workflow and the
// activities. They are defined in package contract, which the workflow and
// the starter import without linking the clients the activities call; these
// are the activities' names for them.
type (
	ModelTurnInput     = contract.ModelTurnInput
	ModelTurnResult    = contract.ModelTurnResult
	ToolCallRef        = contract.ToolCallRef
	AttemptReport      = contract.AttemptReport
	ExecuteToolInput   = contract.ExecuteToolInput
	ExecuteToolResult  = contract.ExecuteToolResult
	DeliverInput       = contract.DeliverInput
	DeliverResult      = contract.DeliverResult
	CommentTarget      = contract.CommentTarget
	ReconcileInput     = contract.ReconcileInput
	ReconcileResult    = contract.ReconcileResult
	Resolution         = contract.Resolution
	TruncateInput      = contract.TruncateInput
	TruncateResult     = contract.TruncateResult
	WorkerLimitsInput  = contract.WorkerLimitsInput
	WorkerLimitsResult = contract.WorkerLimitsResult
	BreakerWait        = contract.BreakerWait
)

// Error types of the application errors the activities return
// (contract.ErrorTypes, where each is described).
const (
	ErrTypeModelAttempt        = contract.ErrTypeModelAttempt
	ErrTypeOperationConflict   = contract.ErrTypeOperationConflict
	ErrTypeOperationInProgress = contract.ErrTypeOperationInProgress
	ErrTypeOperationUnknown    = contract.ErrTypeOperationUnknown
	ErrTypeOperationNotSent    = contract.ErrTypeOperationNotSent
	ErrTypeDeliveryFailed      = contract.ErrTypeDeliveryFailed
	ErrTypeDeliveryNotSent     = contract.ErrTypeDeliveryNotSent
	ErrTypeWorkerConfig        = contract.ErrTypeWorkerConfig
	ErrTypeBreakerOpen         = contract.ErrTypeBreakerOpen
	ErrTypeInvalidResolution   = contract.ErrTypeInvalidResolution
	ErrTypeTransient           = contract.ErrTypeTransient
)

// AttemptReportOf returns the report carried by a failed ModelTurn
// (contract.AttemptReportOf).
func AttemptReportOf(err error) (AttemptReport, bool) { return contract.AttemptReportOf(err) }
