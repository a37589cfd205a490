//! `acknowledge`: a contradiction of a final state, checked at the vendor, leaves the queue.

use super::{Ctx, reviewer};
use crate::args::AcknowledgeArgs;
use crate::error::CliError;

impl Ctx {
    pub(super) async fn acknowledge(&self, a: AcknowledgeArgs) -> Result<String, CliError> {
        let (tenant, op) = self.locate(&a.op).await?;
        let reviewer = reviewer(&a.reviewer)?;
        let result = self
            .reviews
            .acknowledge_contradiction(&tenant, &op, &reviewer, &a.reason, a.version)
            .await;
        self.acted(
            &tenant,
            &op,
            "contradiction acknowledged",
            a.version,
            result,
        )
        .await
    }
}
