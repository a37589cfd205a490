//! The queue's filters: the URL's parameters read into a ledger query (state, contract, host,
//! id or reference prefix, age, order, tenant, page cursor), and the queue's addresses that
//! carry them.

use std::time::Duration;

use super::views::queue_root;
use super::{ReviewUiOptions, words};
use crate::encoding::encode_component;
use crate::ledger::{Cursor, OPEN_STATES, OperationQuery, Order, TenantScope, TextMatch};
use crate::operation::Tenant;
use crate::state::State;

/// The filters as the queue's form shows them (and its links carry them).
pub(super) struct FilterView {
    pub(super) state: String,
    pub(super) contract: String,
    pub(super) host: String,
    pub(super) q: String,
    pub(super) older_than: String,
    pub(super) order: String,
    pub(super) tenant: String,
}

impl FilterView {
    /// Only a state (and the tenant, when the router serves every tenant): nothing else narrows.
    fn unfiltered(state: &str, tenant: &str) -> Self {
        Self {
            state: state.to_owned(),
            contract: String::new(),
            host: String::new(),
            q: String::new(),
            older_than: String::new(),
            order: "oldest".into(),
            tenant: tenant.to_owned(),
        }
    }
}

/// A choice of the state filter.
pub(super) struct StateOption {
    pub(super) value: &'static str,
    pub(super) label: &'static str,
}

/// A filter the page cannot use: 400 with what was wrong.
pub(super) struct BadFilter(pub(super) String);

/// The `state` filter value of the quarantined rows.
pub(super) const QUARANTINED: &str = "quarantined";

/// `90s`, `10m`, `2h`, `1d` (a bare number is minutes).
fn parse_age(s: &str) -> Option<Duration> {
    let s = s.trim();
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (n, unit) = s.split_at(split);
    let n: u64 = n.parse().ok()?;
    let secs = match unit.trim() {
        "s" | "sec" | "secs" => n,
        "" | "m" | "min" | "mins" => n.checked_mul(60)?,
        "h" | "hour" | "hours" => n.checked_mul(3600)?,
        "d" | "day" | "days" => n.checked_mul(86_400)?,
        _ => return None,
    };
    Some(Duration::from_secs(secs))
}

fn parse_state(s: &str) -> Option<State> {
    let norm = s.trim().to_ascii_uppercase().replace(['-', ' '], "_");
    norm.parse().ok()
}

/// What the `state` parameters asked for.
#[derive(Default)]
struct StatesAsked {
    all: bool,
    open: bool,
    quarantined: bool,
    contradicted: bool,
    states: Vec<State>,
}

/// The URL's parameters, read: the filters as shown, the states asked for and the page cursor.
struct Asked {
    filters: FilterView,
    states: StatesAsked,
    after: Option<Cursor>,
}

/// The queue's query, from the URL's parameters: the listing, its filters, and (for the first
/// page of the open queue) the query of the quarantined rows shown above it.
pub(super) fn build_query(
    cfg: &ReviewUiOptions,
    params: &[(String, String)],
    now: i64,
) -> Result<(OperationQuery, FilterView, Option<OperationQuery>), BadFilter> {
    let Asked {
        mut filters,
        states,
        after,
    } = read_params(params)?;
    let scope = scope_of(&cfg.scope, &filters.tenant)?;
    if states.quarantined
        && (states.all || states.open || states.contradicted || !states.states.is_empty())
    {
        return Err(BadFilter(
            "quarantined operations are listed on their own: their stored state may be one \
             this version does not know"
                .into(),
        ));
    }
    // The filters but the states: the quarantined rows shown above the open queue match them.
    let base = narrowed(
        OperationQuery::scoped(scope).limit(cfg.page_size),
        &filters,
        now,
    );
    let mut q = in_states(base.clone(), states, &mut filters);
    // The open queue includes the rows set aside: they need a person too.
    let aside_query = (filters.state == "open" && after.is_none()).then(|| base.quarantined_only());
    if let Some(c) = after {
        q = q.after(c);
    }
    Ok((q, filters, aside_query))
}

/// Reads every parameter, refusing the first that is not a filter the page knows.
fn read_params(params: &[(String, String)]) -> Result<Asked, BadFilter> {
    let mut f = FilterView::unfiltered("open", "");
    let mut s = StatesAsked::default();
    let mut after = None;
    for (k, v) in params {
        let v = v.trim();
        if v.is_empty() {
            continue;
        }
        if v.contains('\0') {
            return Err(BadFilter(format!(
                "the filter {k} contains a NUL character"
            )));
        }
        match k.as_str() {
            "state" => match v {
                "open" => s.open = true,
                "all" => s.all = true,
                "contradicted" => s.contradicted = true,
                QUARANTINED => s.quarantined = true,
                _ => s
                    .states
                    .push(parse_state(v).ok_or_else(|| BadFilter(format!("unknown state {v:?}")))?),
            },
            "contract" => f.contract = v.to_owned(),
            "host" => f.host = v.to_ascii_lowercase(),
            "q" => f.q = v.to_owned(),
            "older_than" => {
                parse_age(v).ok_or_else(|| {
                    BadFilter(format!(
                        "older_than {v:?} is not an age (write 90s, 10m, 2h or 1d)"
                    ))
                })?;
                f.older_than = v.to_owned();
            }
            "order" => match v {
                "oldest" | "newest" => f.order = v.to_owned(),
                _ => {
                    return Err(BadFilter(format!(
                        "order {v:?} is neither oldest nor newest"
                    )));
                }
            },
            "tenant" => f.tenant = v.to_owned(),
            "after" => {
                after = Some(
                    Cursor::parse(v)
                        .map_err(|_| BadFilter("the page link is not valid any more".into()))?,
                );
            }
            other => return Err(BadFilter(format!("unknown filter {other:?}"))),
        }
    }
    Ok(Asked {
        filters: f,
        states: s,
        after,
    })
}

/// The tenants listed: the router's, narrowed to the `tenant` filter when it serves them all.
fn scope_of(serves: &TenantScope, tenant: &str) -> Result<TenantScope, BadFilter> {
    match (serves, tenant) {
        (TenantScope::AllTenants, "") => Ok(TenantScope::AllTenants),
        (TenantScope::AllTenants, t) => Ok(TenantScope::Tenant(Tenant::new(t))),
        (TenantScope::Tenant(t), "") => Ok(TenantScope::Tenant(t.clone())),
        (TenantScope::Tenant(t), other) if other == t.as_str() => {
            Ok(TenantScope::Tenant(t.clone()))
        }
        (TenantScope::Tenant(t), other) => Err(BadFilter(format!(
            "this page shows tenant {t} only, not {other:?}"
        ))),
    }
}

/// `q` narrowed by every filter but the states, in the order asked.
fn narrowed(mut q: OperationQuery, f: &FilterView, now: i64) -> OperationQuery {
    if !f.contract.is_empty() {
        q = q.contract(f.contract.clone());
    }
    if !f.host.is_empty() {
        q = q.host(f.host.clone());
    }
    if !f.q.is_empty() {
        q = q.text(TextMatch::Prefix(f.q.clone()));
    }
    if let Some(d) = (!f.older_than.is_empty())
        .then(|| parse_age(&f.older_than))
        .flatten()
    {
        let ms = i64::try_from(d.as_millis()).unwrap_or(i64::MAX);
        q = q.created_before(now.saturating_sub(ms));
    }
    q.order(if f.order == "newest" {
        Order::NewestFirst
    } else {
        Order::OldestFirst
    })
}

/// `q` narrowed to the states asked for (the open ones by default); `f.state` says which.
fn in_states(mut q: OperationQuery, s: StatesAsked, f: &mut FilterView) -> OperationQuery {
    let StatesAsked {
        all,
        open,
        quarantined,
        contradicted,
        mut states,
    } = s;
    if quarantined {
        f.state = QUARANTINED.into();
        q = q.quarantined_only();
    } else if contradicted {
        // Final states, mostly: every state, narrowed to the contradicted rows.
        f.state = "contradicted".into();
        q = q.contradicted();
    } else if all {
        f.state = "all".into();
    } else if states.is_empty() {
        q = q.states(OPEN_STATES);
    } else {
        f.state = states[0].as_str().to_owned();
        if open {
            states.extend(OPEN_STATES);
        }
        q = q.states(states);
    }
    q
}

/// The queue URL for these filters (and a cursor).
pub(super) fn queue_href(base: &str, f: &FilterView, after: Option<&str>) -> String {
    let mut parts = Vec::new();
    let mut push = |k: &str, v: &str| {
        if !v.is_empty() {
            parts.push(format!("{k}={}", encode_component(v)));
        }
    };
    if f.state != "open" {
        push("state", &f.state);
    }
    push("contract", &f.contract);
    push("host", &f.host);
    push("q", &f.q);
    push("older_than", &f.older_than);
    if f.order != "oldest" {
        push("order", &f.order);
    }
    push("tenant", &f.tenant);
    if let Some(a) = after {
        push("after", a);
    }
    if parts.is_empty() {
        queue_root(base)
    } else {
        format!("{}?{}", queue_root(base), parts.join("&"))
    }
}

/// The queue URL of one `state` filter value (in the `tenant` filter's tenant), nothing else
/// narrowed.
pub(super) fn state_href(base: &str, state: &str, tenant: &str) -> String {
    queue_href(base, &FilterView::unfiltered(state, tenant), None)
}

/// The choices of the state filter, in the order shown.
pub(super) fn state_options() -> Vec<StateOption> {
    let mut v = vec![
        StateOption {
            value: "open",
            label: "Every open state",
        },
        StateOption {
            value: "contradicted",
            label: "Contradicted final states",
        },
    ];
    for s in [
        State::ManualReview,
        State::Unknown,
        State::Processing,
        State::Prepared,
        State::InFlight,
        State::RetryReady,
        State::Succeeded,
        State::Rejected,
    ] {
        v.push(StateOption {
            value: s.as_str(),
            label: words::state(s),
        });
    }
    v.push(StateOption {
        value: QUARANTINED,
        label: "Quarantined (cannot be read)",
    });
    v.push(StateOption {
        value: "all",
        label: "Every state",
    });
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ages_parse_with_units() {
        assert_eq!(parse_age("90s"), Some(Duration::from_secs(90)));
        assert_eq!(parse_age("10m"), Some(Duration::from_secs(600)));
        assert_eq!(parse_age("10"), Some(Duration::from_secs(600)));
        assert_eq!(parse_age("2h"), Some(Duration::from_secs(7200)));
        assert_eq!(parse_age("1d"), Some(Duration::from_secs(86_400)));
        assert_eq!(parse_age("ten"), None);
        assert_eq!(parse_age("5w"), None);
        assert_eq!(parse_age(""), None);
        assert_eq!(parse_state("manual_review"), Some(State::ManualReview));
        assert_eq!(parse_state("Manual review"), Some(State::ManualReview));
        assert_eq!(parse_state("stuck"), None);
    }
}
