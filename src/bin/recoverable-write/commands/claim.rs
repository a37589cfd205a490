//! `claim`: a reviewer takes an operation over (or takes it over from another reviewer).

use super::{Ctx, reviewer};
use crate::args::ClaimArgs;
use crate::error::CliError;

impl Ctx {
    pub(super) async fn claim(&self, a: ClaimArgs) -> Result<String, CliError> {
        let (tenant, op) = self.locate(&a.op).await?;
        let reviewer = reviewer(&a.reviewer)?;
        let result = if a.take_over {
            self.reviews
                .take_over(&tenant, &op, &reviewer, &a.reason, a.version)
                .await
        } else {
            self.reviews
                .claim_with_reason(&tenant, &op, &reviewer, &a.reason, a.version)
                .await
        };
        self.acted(&tenant, &op, "claimed", a.version, result).await
    }
}
