//! axum answers (feature `axum`): [`Outcome`] and [`Error`] implement `IntoResponse`, so a
//! handler returns them to its caller directly.
//!
//! The mapping never tells a caller to retry a write whose outcome is unknown:
//!
//! | what | status | body |
//! |---|---|---|
//! | `Outcome` `SUCCEEDED` | `201 Created` | the outcome as JSON |
//! | `Outcome` `REJECTED` | `422 Unprocessable Entity` | the outcome (a documented refusal: no side effect) |
//! | any other `Outcome`; `Error::Unknown`, `Processing`, `RetryScheduled`, `ManualReview` | `202 Accepted` | the outcome: "… is being verified; do not create it again"; `Retry-After` when the vendor gave one |
//! | `Error::Conflict`, `Error::KeyMismatch` | `409 Conflict` | `{"operation_id", "message"}`: nothing was sent |
//! | `Error::NotFound` | `404 Not Found` | nothing was sent |
//! | `Error::Denied` | `403 Forbidden` | nothing was sent |
//! | `Error::BodyTooLarge` | `413 Payload Too Large` | nothing was sent |
//! | `Error::NonReplayableBody`, `Error::BodyRead` | `400 Bad Request` | nothing was sent |
//! | `Error::Ledger` | `503 Service Unavailable` | nothing was sent |
//! | `Error::Inner` | `502 Bad Gateway` | an untracked request failed below |
//! | any other error (a configuration problem) | `500 Internal Server Error` | nothing was sent |
//!
//! ```
//! use axum::response::IntoResponse;
//! use recoverable_write::{Outcome, OperationId, State, Tenant};
//!
//! let pending = Outcome::new(Tenant::new("tenant-a"), OperationId::new("op-204"), State::Unknown);
//! assert_eq!(pending.into_response().status(), 202);
//! ```

use axum::Json;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::json;

use crate::error::{Error, Outcome};
use crate::state::State;

impl IntoResponse for Outcome {
    fn into_response(self) -> Response {
        let status = match self.state {
            State::Succeeded => StatusCode::CREATED,
            State::Rejected => StatusCode::UNPROCESSABLE_ENTITY,
            _ => StatusCode::ACCEPTED,
        };
        (status, Json(self)).into_response()
    }
}

impl IntoResponse for Error {
    fn into_response(self) -> Response {
        let message = self.to_string();
        let plain = |status: StatusCode, operation: Option<&crate::OperationId>| {
            (
                status,
                Json(json!({ "operation_id": operation, "message": message })),
            )
                .into_response()
        };
        match self {
            Error::Processing {
                outcome,
                retry_after,
            } => {
                let mut res = outcome.into_response();
                if let Some(after) = retry_after
                    && let Ok(v) = HeaderValue::from_str(&after.as_secs().max(1).to_string())
                {
                    res.headers_mut().insert(header::RETRY_AFTER, v);
                }
                res
            }
            Error::Unknown { outcome, .. }
            | Error::RetryScheduled { outcome }
            | Error::ManualReview { outcome, .. } => outcome.into_response(),
            Error::Conflict { ref operation } | Error::KeyMismatch { ref operation } => {
                plain(StatusCode::CONFLICT, Some(operation))
            }
            Error::NotFound { ref operation, .. } => plain(StatusCode::NOT_FOUND, Some(operation)),
            Error::Denied { ref operation, .. } => plain(StatusCode::FORBIDDEN, Some(operation)),
            Error::BodyTooLarge { .. } => plain(StatusCode::PAYLOAD_TOO_LARGE, None),
            Error::NonReplayableBody | Error::BodyRead { .. } => {
                plain(StatusCode::BAD_REQUEST, None)
            }
            Error::Ledger { ref operation, .. } => {
                plain(StatusCode::SERVICE_UNAVAILABLE, operation.as_ref())
            }
            Error::Inner { .. } => plain(StatusCode::BAD_GATEWAY, None),
            ref other => plain(StatusCode::INTERNAL_SERVER_ERROR, other.operation_id()),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::{OperationId, Tenant};

    fn outcome(state: State) -> Outcome {
        Outcome::new(Tenant::new("t"), OperationId::new("op-1"), state)
    }

    #[test]
    fn outcomes_map_to_created_unprocessable_or_accepted() {
        assert_eq!(outcome(State::Succeeded).into_response().status(), 201);
        assert_eq!(outcome(State::Rejected).into_response().status(), 422);
        for s in [
            State::Unknown,
            State::Processing,
            State::RetryReady,
            State::ManualReview,
            State::InFlight,
        ] {
            assert_eq!(outcome(s).into_response().status(), 202, "{s}");
        }
    }

    #[test]
    fn errors_never_say_retry_and_name_what_was_sent() {
        let res = Error::Processing {
            outcome: outcome(State::Processing),
            retry_after: Some(Duration::from_secs(7)),
        }
        .into_response();
        assert_eq!(res.status(), 202);
        assert_eq!(res.headers()[header::RETRY_AFTER], "7");
        let op = OperationId::new("op-1");
        assert_eq!(
            Error::Conflict {
                operation: op.clone()
            }
            .into_response()
            .status(),
            409
        );
        assert_eq!(
            Error::KeyMismatch {
                operation: op.clone()
            }
            .into_response()
            .status(),
            409
        );
        assert_eq!(
            Error::Ledger {
                operation: Some(op),
                source: crate::ledger::LedgerError::Config("down".into()),
            }
            .into_response()
            .status(),
            503
        );
        assert_eq!(
            Error::BodyTooLarge { limit: 1 }.into_response().status(),
            413
        );
    }
}
