//! Built-in contracts: one per documented vendor behaviour.
//!
//! Each profile follows the vendor's own documentation, specification or official SDK source,
//! cites it, and carries the date it was checked ([`CHECKED`]). Where a source is silent
//! (UNCONFIRMED), the profile takes the conservative choice: treat the answer as indeterminate
//! and reconcile, and says so. A profile is a starting point: adjust it with the `with_*`
//! methods of [`Contract`], extend it from a configuration file (`extends = "stripe-v1"`, see
//! [`Contracts::from_toml_str`](super::Contracts::from_toml_str)), or write the whole contract.
//!
//! | name | vendor | key | retention | replay | lookup |
//! |---|---|---|---|---|---|
//! | `stripe-v1` | Stripe API v1 | header `Idempotency-Key` (≤ 255) | 24 h | stored first response, 500 included | same-key replay |
//! | `stripe-v2` | Stripe API v2 | header `Idempotency-Key` | 30 days | current state | same-key replay |
//! | `adyen` | Adyen | header `Idempotency-Key` (≤ 64) | 31 days | stored first response | webhooks |
//! | `paypal-orders-v2`, `paypal-payments-v2`, `paypal-payouts`, `paypal-subscriptions` | PayPal | header `PayPal-Request-Id` | 6 h, 45 days, 30 days, 72 h | current state (201, then 200) | same-key replay |
//! | `square` | Square | JSON body `/idempotency_key` (≤ 45) | not published | first successful response | webhooks |
//! | `aws-ec2` | AWS EC2 | form field `ClientToken` (≤ 64 ASCII) | UNCONFIRMED | current state | `DescribeInstances` by `client-token` (XML answer), settles in 5 min |
//! | `google-aip155` | Google Cloud | query `requestId` (UUID) | 60 min | current state | same-key replay |
//! | `ietf-draft` | IETF draft | header `Idempotency-Key`, quoted | published per resource | stored first response | same-key replay |
//! | `no-idempotency` | Twilio-like | none | none | unsafe: never replayed | none: review |
//! | `github` | GitHub REST | none | none | unsafe: never replayed | none: review |
//! | `default` | undocumented | header `Idempotency-Key` | unknown | unsafe | not described |
//!
//! # What a naive implementation gets wrong
//!
//! The profiles keep the differences VENDOR_CONTRACTS.md warns about:
//!
//! 1. Stripe v1 replays store the first result, a 500 included: a same-key replay re-fetches
//!    it and never re-runs the work, so a cached 500 stays unknown. Stripe v2 is the opposite: a
//!    replay drives the work to completion ([`Replay::StoredFirstResponse`] versus
//!    [`Replay::CurrentState`]).
//! 2. PayPal replays the current status (201 the first time, 200 on a duplicate: both are
//!    success), and its retention depends on the API ([`PayPalApi`]), not 24 h.
//! 3. An EC2 `ClientToken` is zonal when a zone or subnet is given: the same token in another
//!    zone launches new instances. See [`aws_ec2`] for how the zone stays part of the operation.
//! 4. Mismatch and in-flight answers differ per vendor (400 `idempotency_error`, 422,
//!    `IdempotentParameterMismatch`, `IDEMPOTENCY_KEY_REUSED`; 409, 409 + 704): each profile
//!    matches its vendor's own signal, nothing is normalised away.
//! 5. `Retry-After` may be an obsolete HTTP-date, GitHub limits come as 403 without it, and
//!    Twilio has no outbound idempotency at all ([`no_idempotency`], [`github`]).

use super::rules::{EvidenceClass, Rule, StatusMatch};
use super::{
    AnswerFormat, Contract, KeyFormat, KeyPlacement, Lookup, LookupAnswer, RemoteRef, Replay,
};
use crate::operation::PayloadDigest;

/// The date the built-in profiles were last checked against their sources.
pub const CHECKED: &str = "2026-11-30";

/// The names [`by_name`] knows, in the order of the table above.
pub const NAMES: &[&str] = &[
    "stripe-v1",
    "stripe-v2",
    "adyen",
    "paypal-orders-v2",
    "paypal-payments-v2",
    "paypal-payouts",
    "paypal-subscriptions",
    "square",
    "aws-ec2",
    "google-aip155",
    "ietf-draft",
    "no-idempotency",
    "github",
    "conservative",
];

/// The JSON pointers that make an EC2 launch zonal: a JSON-bodied EC2 contract with a field
/// digest must include both, or a failover to another zone would look like the same operation
/// (see [`aws_ec2`]). The configuration loader refuses such a digest.
pub const EC2_SCOPE_POINTERS: &[&str] = &["/Placement/AvailabilityZone", "/SubnetId"];

const HOUR: u64 = 3600;
const DAY: u64 = 24 * HOUR;

/// The built-in profile with this name (as in a configuration's `extends`), or `None`.
///
/// `conservative` and `default` both name [`conservative`]. PayPal takes one name per API
/// (`paypal-orders-v2`, `paypal-payments-v2`, `paypal-payouts`, `paypal-subscriptions`),
/// because its retention differs per API. See [`NAMES`].
pub fn by_name(name: &str) -> Option<Contract> {
    Some(match name {
        "stripe-v1" => stripe_v1(),
        "stripe-v2" => stripe_v2(),
        "adyen" => adyen(),
        "paypal-orders-v2" => paypal(PayPalApi::OrdersV2),
        "paypal-payments-v2" => paypal(PayPalApi::PaymentsV2),
        "paypal-payouts" => paypal(PayPalApi::Payouts),
        "paypal-subscriptions" => paypal(PayPalApi::Subscriptions),
        "square" => square(),
        "aws-ec2" => aws_ec2(),
        "google-aip155" => google_aip155(),
        "ietf-draft" => ietf_draft(),
        "no-idempotency" => no_idempotency(),
        "github" => github(),
        "conservative" | "default" => conservative(),
        _ => return None,
    })
}

/// Every built-in profile, one per name in [`NAMES`] (PayPal once per API).
pub fn all() -> Vec<Contract> {
    NAMES.iter().filter_map(|n| by_name(n)).collect()
}

/// The contract for a vendor nobody documented. Name: `default`.
///
/// - Key: header `Idempotency-Key`, plain; at most 64 characters.
/// - Replay: [`Replay::Unsafe`]. Nothing says the vendor dedupes, so a same-key replay could
///   execute the write twice; only proof of non-execution allows a resend.
/// - Retention: unknown.
/// - Rules: none; the conservative defaults of the [module docs](super) apply (every 5xx, 408,
///   429, 503, 3xx is `Unknown`; 400/401/403/422 are `Rejected`; 409 is `Conflict`; 202 is
///   `Processing`).
/// - Remote reference: `/id` is taken when present, but success does not require it.
/// - Lookup: not described (whatever reconciler the recovery engine has).
///
/// Source: DESIGN.md ("Classification"), RFC 9110 §9.2.2 (a client SHOULD NOT automatically
/// retry a non-idempotent request unless it knows the semantics are idempotent or can detect
/// that the original was never applied). Checked 2026-11-30.
pub fn conservative() -> Contract {
    Contract::new("default", KeyPlacement::header("Idempotency-Key"))
        .remote_ref(RemoteRef::optional("/id"))
}

/// Stripe, API v1. Name: `stripe-v1`.
///
/// - Key: header `Idempotency-Key`, at most 255 characters (we send a UUID v4, as advised).
///   Honoured on `POST`; it has no effect on `GET` and `DELETE`, so route this contract with
///   `method = "POST"`.
/// - Retention: keys may be pruned once at least 24 h old (a minimum); after that the same key
///   runs as a new request.
/// - Replay: [`Replay::StoredFirstResponse`]. Stripe stores the first status and body once the
///   endpoint starts executing and returns them for every retry, a 500 included: a same-key
///   replay re-fetches the first result, it never re-runs the work. A cached 500 therefore stays
///   `Unknown` however often it is replayed: reconcile (pitfall 1).
/// - Rules, in order:
///   1. 429 → `NotExecuted`: the rate limiter runs before idempotency, nothing is stored.
///   2. 409 with `error.code = idempotency_key_in_use` → `Conflict { InFlight }`: the first
///      request is still executing; not stored, retry later with the same key.
///   3. 400 with `error.type = idempotency_error` → `Conflict { Mismatch }`: the key was used
///      with other parameters or on another endpoint.
///   4. 5xx with `Stripe-Should-Retry: false` → `Unknown`. The header overrides the status and
///      says a retry will not help: because the first result is cached, a replay would return
///      the same 500. It does **not** say the charge did not happen, so this is not `Rejected`:
///      the operation is reconciled by lookup, and goes to review if nothing can decide.
///   5. 4xx with `Stripe-Should-Retry: true` → `Unknown`: Stripe says the same request may
///      still succeed, so the answer is not a final rejection.
///   6. 401 → `Rejected`: authentication failed, nothing stored.
///
///   Everything else takes the defaults: validation 400s and 402 declines are `Rejected`
///   (not stored), other 5xx `Unknown`, other 409s `Conflict { InFlight }`.
/// - Remote reference: `/id`, required (`ch_...`, `pi_...`): a 2xx without it is `Unknown`.
/// - Lookup: [`Lookup::SameKeyReplay`] inside the 24 h (it re-fetches the stored result). For
///   a cached 500, or after retention, look the object up by the metadata or reference you
///   attached: list endpoints are immediately consistent for top-level objects (set
///   [`Lookup::ListByReference`], e.g. `/v1/payment_intents` matched on
///   `/metadata/operation_id`); the Search API lags (usually under a minute) and is not for
///   read-after-write.
/// - The official SDKs retry connection errors, 409 and 5xx with jittered backoff (0.5–5 s) and
///   do not read `Retry-After`; here the recovery engine is the only retry owner, so switch
///   SDK retries off.
/// - Secret response fields ([`STRIPE_SECRET_RESPONSE_FIELDS`]): `client_secret` (PaymentIntent,
///   SetupIntent, Checkout Session: "It should not be stored, logged, or exposed to anyone
///   other than the customer") and `secret` (a webhook endpoint's signing secret, "only
///   returned at creation"; an ephemeral key's secret), wherever they appear in an answer. The
///   stored first response and the kept lookup answers carry `[redacted]` instead: read a
///   `client_secret` from the first answer, or retrieve the object again.
///
/// Sources: docs.stripe.com/api/idempotent_requests; docs.stripe.com/error-low-level;
/// docs.stripe.com/api/errors; docs.stripe.com/api/payment_intents/object (`client_secret`);
/// docs.stripe.com/api/webhook_endpoints/object (`secret`); stripe-node
/// `src/RequestSender.ts`; stripe-python `_api_requestor.py`. Checked 2026-11-30 (secret
/// fields 2026-12-02).
pub fn stripe_v1() -> Contract {
    let c = Contract::new("stripe-v1", KeyPlacement::header("Idempotency-Key"))
        .max_key_len(255)
        .retention_secs(DAY)
        .replay(Replay::StoredFirstResponse)
        .rule(
            Rule::new(429, EvidenceClass::NotExecuted)
                .reason("rate limited before idempotency runs; nothing was stored"),
        )
        .rule(
            Rule::new(409, EvidenceClass::ConflictInFlight)
                .body("/error/code", "idempotency_key_in_use")
                .reason("a request with this key is still executing; retry later with the same key"),
        )
        .rule(
            Rule::new(400, EvidenceClass::ConflictMismatch)
                .body("/error/type", "idempotency_error")
                .reason("the key was used with other parameters or on another endpoint"),
        )
        .rule(
            Rule::new(StatusMatch::range(500, 599), EvidenceClass::Unknown)
                .header("Stripe-Should-Retry", "false")
                .reason(
                    "Stripe-Should-Retry: false; the first result is cached, a replay returns it again: reconcile",
                ),
        )
        .rule(
            Rule::new(StatusMatch::range(400, 499), EvidenceClass::Unknown)
                .header("Stripe-Should-Retry", "true")
                .reason("Stripe-Should-Retry: true; not a final answer"),
        )
        .rule(
            Rule::new(401, EvidenceClass::Rejected)
                .reason("authentication failed; nothing was stored"),
        )
        .remote_ref(RemoteRef::required("/id"))
        .lookup(Lookup::SameKeyReplay);
    with_secret_response_fields(c, STRIPE_SECRET_RESPONSE_FIELDS)
}

/// The fields of Stripe's answers that are credentials, kept out of the ledger by the Stripe
/// profiles (see [`stripe_v1`]; [`stripe_v2`] adds `signing_secret`).
pub const STRIPE_SECRET_RESPONSE_FIELDS: &[&str] = &["client_secret", "secret"];

/// Stripe, API v2. Name: `stripe-v2`.
///
/// - Key: header `Idempotency-Key`; the SDK sends one on `POST` and `DELETE`. The length limit
///   is not stated for v2 (UNCONFIRMED): 64 characters is assumed, which holds our UUIDs.
/// - Retention: 30 days.
/// - Replay: [`Replay::CurrentState`]. A retry "doesn't repeat successful operations" and
///   drives failed or partial work to completion, returning an updated response, not a cached
///   one: the opposite of v1 (pitfall 1). A same-key replay is therefore the way to finish an
///   unknown operation.
/// - Rules: none beyond the defaults. The mismatch and in-flight status codes are UNCONFIRMED,
///   so nothing is mapped to `Conflict { Mismatch }` or `NotExecuted`: a 409 stays the default
///   `Conflict { InFlight }` (nothing proven), a 429 stays `Unknown` (v1's "rate limit runs
///   before idempotency" is not documented for v2), every 5xx is `Unknown`, and a 4xx refusing a
///   replay after an attempt that may have applied is kept `Unknown` by the state machine.
/// - Remote reference: `/id`, required.
/// - Lookup: [`Lookup::SameKeyReplay`] (it completes the work and answers with the current
///   state). Lists are eventually consistent by default and their lag is UNCONFIRMED: if you
///   configure a list lookup instead, also set a generous `settle_secs` (minutes), so that an
///   empty list right after the write is not taken as evidence.
/// - Secret response fields: those of [`stripe_v1`] ([`STRIPE_SECRET_RESPONSE_FIELDS`]), and
///   `signing_secret` (a v2 event destination's webhook endpoint signing secret, "only
///   includable on creation").
///
/// Sources: docs.stripe.com/api-v2-overview; docs.stripe.com/api/idempotent_requests (2026
/// preview); docs.stripe.com/api/v2/core/event_destinations (`webhook_endpoint.signing_secret`).
/// Checked 2026-11-30 (secret fields 2026-12-02).
pub fn stripe_v2() -> Contract {
    let c = Contract::new("stripe-v2", KeyPlacement::header("Idempotency-Key"))
        .retention_secs(30 * DAY)
        .replay(Replay::CurrentState)
        .remote_ref(RemoteRef::required("/id"))
        .lookup(Lookup::SameKeyReplay);
    with_secret_response_fields(c, STRIPE_SECRET_RESPONSE_FIELDS)
        .secret_response_field("signing_secret")
}

/// `c` with `fields` marked secret in its answers.
fn with_secret_response_fields(c: Contract, fields: &[&str]) -> Contract {
    fields.iter().fold(c, |c, f| c.secret_response_field(*f))
}

/// Adyen. Name: `adyen`.
///
/// - Key: header `Idempotency-Key`, at most 64 characters, UUID v4 advised; `POST`.
/// - Retention: at least 31 days.
/// - Replay: [`Replay::StoredFirstResponse`]: the first response is returned, echoing the
///   `Idempotency-Key` header.
/// - Scope: the company account; keys are NOT checked across regional endpoints. Route each
///   regional host on its own; the URL is part of the payload hash, so the same operation sent
///   to another region's endpoint is a `Conflict` and nothing is sent.
/// - Rules, in order:
///   1. 409 or 422 with `errorCode = 704` ("request already processed or in progress") →
///      `Conflict { InFlight }` (current docs say 409, older ones 422 or 409).
///   2. 4xx/5xx with `Transient-Error: true` → `Unknown`: retry later with the same key (a
///      same-key replay is safe). Without the header, or with `false`, Adyen says "do not
///      retry"; that is not proof of anything either, so a 5xx stays `Unknown` (default) and
///      is reconciled, while a 4xx is the default `Rejected`.
/// - Mismatch behaviour: UNCONFIRMED. No rule maps anything to `Conflict { Mismatch }`; a
///   refusal of a replay after an attempt that may have applied is kept `Unknown` by the state
///   machine.
/// - Remote reference: `/pspReference`, taken when present (the payments API's reference; not
///   part of the idempotency documentation, so success does not require it).
/// - Lookup: UNCONFIRMED; webhooks are the documented way to learn lost outcomes
///   ([`Lookup::Webhooks`]). Until a notification arrives the operation stays unknown.
///
/// Source: docs.adyen.com/development-resources/api-idempotency. Checked 2026-11-30.
pub fn adyen() -> Contract {
    Contract::new("adyen", KeyPlacement::header("Idempotency-Key"))
        .max_key_len(64)
        .retention_secs(31 * DAY)
        .replay(Replay::StoredFirstResponse)
        .rule(
            Rule::new(409, EvidenceClass::ConflictInFlight)
                .body("/errorCode", "704")
                .reason("704: request already processed or in progress"),
        )
        .rule(
            Rule::new(422, EvidenceClass::ConflictInFlight)
                .body("/errorCode", "704")
                .reason("704: request already processed or in progress (older API versions)"),
        )
        .rule(
            Rule::new(StatusMatch::range(400, 599), EvidenceClass::Unknown)
                .header("Transient-Error", "true")
                .reason("Transient-Error: true; retry later with the same key"),
        )
        .remote_ref(RemoteRef::optional("/pspReference"))
        .lookup(Lookup::Webhooks { events: Vec::new() })
}

/// The PayPal REST API a [`paypal`] contract is for: the key retention differs per API.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum PayPalApi {
    /// Orders v2: keys kept 6 h (up to 72 h on request), 1–108 characters.
    OrdersV2,
    /// Payments v2 (capture, refund, void, reauthorize): keys kept 45 days.
    PaymentsV2,
    /// Payouts: keys kept 30 days.
    Payouts,
    /// Subscriptions: keys kept 72 h.
    Subscriptions,
}

impl PayPalApi {
    /// The documented retention, in seconds.
    pub const fn retention_secs(self) -> u64 {
        match self {
            Self::OrdersV2 => 6 * HOUR,
            Self::PaymentsV2 => 45 * DAY,
            Self::Payouts => 30 * DAY,
            Self::Subscriptions => 72 * HOUR,
        }
    }

    /// The profile name: `paypal-orders-v2`, `paypal-payments-v2`, `paypal-payouts`,
    /// `paypal-subscriptions`.
    pub const fn profile_name(self) -> &'static str {
        match self {
            Self::OrdersV2 => "paypal-orders-v2",
            Self::PaymentsV2 => "paypal-payments-v2",
            Self::Payouts => "paypal-payouts",
            Self::Subscriptions => "paypal-subscriptions",
        }
    }
}

/// PayPal REST, per API. Name: [`PayPalApi::profile_name`].
///
/// - Key: header `PayPal-Request-Id` on `POST`; not every API supports it. Orders v2 accepts
///   1–108 characters; the other limits are not stated (UNCONFIRMED): 64 is assumed, which
///   holds our UUIDs.
/// - Retention, per API (pitfall 2): Orders v2 6 h (up to 72 h on request: raise it with
///   [`Contract::retention_secs`] only if PayPal granted it), Payments v2 (capture,
///   refund, void, reauthorize) 45 days, Payouts 30 days, Subscriptions 72 h.
/// - Replay: [`Replay::CurrentState`]. A duplicate returns the LATEST STATUS of the earlier
///   request, not a stored copy: authorize and capture answer 201 the first time and 200 on a
///   duplicate. Both are success (the default 2xx mapping).
/// - Rules: 409 with `PREVIOUS_REQUEST_IN_PROGRESS` (as `details[0].issue` or `name`) →
///   `Conflict { InFlight }`: a concurrent duplicate (documented for void and refund).
/// - Mismatch behaviour: UNCONFIRMED; no rule maps anything to `Conflict { Mismatch }`.
/// - Remote reference: `/id`, required (order, capture, refund, payout batch ids).
/// - Lookup: [`Lookup::SameKeyReplay`] inside the retention window (it answers with the current
///   status). Once the id is known, `GET` the order, capture or refund by id.
///
/// Sources: developer.paypal.com/api/rest/reference/idempotency; paypal-rest-api-specifications.
/// Checked 2026-11-30.
pub fn paypal(api: PayPalApi) -> Contract {
    let c = Contract::new(
        api.profile_name(),
        KeyPlacement::header("PayPal-Request-Id"),
    )
    .retention_secs(api.retention_secs())
    .replay(Replay::CurrentState)
    .rule(
        Rule::new(409, EvidenceClass::ConflictInFlight)
            .body("/details/0/issue", "PREVIOUS_REQUEST_IN_PROGRESS")
            .reason("PREVIOUS_REQUEST_IN_PROGRESS: the first request with this id still runs"),
    )
    .rule(
        Rule::new(409, EvidenceClass::ConflictInFlight)
            .body("/name", "PREVIOUS_REQUEST_IN_PROGRESS")
            .reason("PREVIOUS_REQUEST_IN_PROGRESS: the first request with this id still runs"),
    )
    .remote_ref(RemoteRef::required("/id"))
    .lookup(Lookup::SameKeyReplay);
    match api {
        PayPalApi::OrdersV2 => c.max_key_len(108),
        _ => c,
    }
}

/// Square. Name: `square`.
///
/// - Key: the JSON body field `idempotency_key` (not a header). CreatePayment accepts 1–45
///   characters, other endpoints 64–255: the profile uses 45, the smallest, so it fits every
///   endpoint (a 36-character UUID fits); raise it per route if you need longer keys. A key the
///   caller put in the body is replaced by the operation's key.
/// - Retention: not published (`None`).
/// - Replay: [`Replay::StoredFirstResponse`]: the first *successful* response is returned.
///   Only successes are stored, so a replay after a failed first attempt runs again, which is
///   safe because that attempt had no effect.
/// - Rules, on the first error (`errors[0].code`):
///   1. `IDEMPOTENCY_KEY_REUSED` on any 4xx → `Conflict { Mismatch }` (the HTTP status is
///      UNCONFIRMED, so the code decides).
///   2. `TEMPORARY_ERROR` on any 4xx/5xx → `Unknown`: it may be retried with the same key.
///   3. `RATE_LIMITED` on any 4xx/5xx → `Unknown`: the code exists, but Square does not
///      document that a rate-limited request was not executed (UNCONFIRMED), so it is not
///      `NotExecuted`.
/// - Remote reference: endpoint-specific (CreatePayment: `/payment/id`); not set here.
/// - Lookup: ListPayments cannot filter by key or reference; webhooks (`payment.created`) are
///   advised ([`Lookup::Webhooks`]).
///
/// Sources: developer.squareup.com/docs/working-with-apis/idempotency; square
/// connect-api-specification. Checked 2026-11-30.
pub fn square() -> Contract {
    Contract::new("square", KeyPlacement::json_body("/idempotency_key"))
        .max_key_len(45)
        .replay(Replay::StoredFirstResponse)
        .rule(
            Rule::new(
                StatusMatch::range(400, 499),
                EvidenceClass::ConflictMismatch,
            )
            .body("/errors/0/code", "IDEMPOTENCY_KEY_REUSED")
            .reason("IDEMPOTENCY_KEY_REUSED: the key was used with another request"),
        )
        .rule(
            Rule::new(StatusMatch::range(400, 599), EvidenceClass::Unknown)
                .body("/errors/0/code", "TEMPORARY_ERROR")
                .reason("TEMPORARY_ERROR; may be retried with the same key"),
        )
        .rule(
            Rule::new(StatusMatch::range(400, 599), EvidenceClass::Unknown)
                .body("/errors/0/code", "RATE_LIMITED")
                .reason("RATE_LIMITED; not documented as not executed"),
        )
        .lookup(Lookup::Webhooks {
            events: vec!["payment.created".to_owned()],
        })
}

/// AWS EC2 (`RunInstances` and ~60 other actions), Query API. Name: `aws-ec2`.
///
/// - Key: the parameter `ClientToken`, case-sensitive, at most 64 ASCII characters, sent as a
///   field of the `application/x-www-form-urlencoded` body (the SDKs' form). For the
///   query-string form of the API, use `.key(KeyPlacement::query("ClientToken"))`.
/// - Scope (pitfall 3): the token is zonal when an Availability Zone is given directly
///   (`Placement.AvailabilityZone`) or implied by `SubnetId`, else regional. The same token in
///   another zone or Region launches NEW instances: a failover does not carry the dedupe. So the
///   zone and the Region must be part of the operation's identity:
///   - the Region is the endpoint host (`ec2.eu-west-1.amazonaws.com`): route per Region, and
///     the URL is in the payload hash;
///   - with this profile's full digest, the form fields `Placement.AvailabilityZone` and
///     `SubnetId` are in the hashed body bytes.
///
///   So the same operation re-presented in another zone has another payload hash: it is a
///   `Conflict` and nothing is sent, instead of a duplicate launch. A failover is a new
///   operation, and a human or the caller decides it after the first one is resolved. If you
///   front EC2 with a JSON body and switch to a field digest, the fields must include
///   [`EC2_SCOPE_POINTERS`] (`/Placement/AvailabilityZone`, `/SubnetId`); the configuration
///   loader refuses an `aws-ec2` contract whose field digest lacks them.
/// - Mismatch: `IdempotentParameterMismatch` (400-class, in the XML error's `<Code>`) →
///   `Conflict { Mismatch }`. Parameters other than Region and zone are compared.
/// - Retention: "at least 24 h after the instance terminates" in an older document, silent in
///   the current one: UNCONFIRMED, so `None`, and same-key replay is never assumed to be inside
///   the window.
/// - Replay: [`Replay::CurrentState`]: the same response, instance state possibly updated.
/// - Lookup: `DescribeInstances` filtered by `client-token` = the key, on the same regional
///   endpoint ([`Lookup::ListByReference`]), its XML answer read by element paths
///   ([`AnswerFormat::Xml`]): the items are the reservations
///   (`/DescribeInstancesResponse/reservationSet/item`, one per launch); the one whose first
///   instance carries the token (`/instancesSet/item/clientToken`) is the launch, whatever its
///   instance's state (`/instancesSet/item/instanceState/name`: `pending`, `running`,
///   `stopping`, `stopped`, `shutting-down`, `terminated`: each means the launch ran), and its
///   first instance's id (`/instancesSet/item/instanceId`) is the remote reference. It is
///   eventually consistent: an empty `reservationSet` or `InvalidInstanceID.NotFound` right
///   after the launch proves nothing. `settle_secs` is 300: "poll with backoff for minutes",
///   the exact time is not given (the conservative choice). After it, an empty answer is weak
///   evidence (the operation stays unknown), never proof that nothing was launched.
/// - Remote reference of the first answer: the XML `RunInstances` answer is not read for one
///   (a remote reference is a JSON pointer), so none is required.
/// - Secret response fields: `keyMaterial`, the unencrypted private key a `CreateKeyPair`
///   answer carries, in case this profile is routed to it.
///
/// Sources: docs.aws.amazon.com/ec2/latest/devguide/ec2-api-idempotency.html;
/// docs.aws.amazon.com/ec2/latest/devguide/eventual-consistency.html;
/// docs.aws.amazon.com/AWSEC2/latest/APIReference/API_DescribeInstances.html (the answer's
/// `reservationSet`, `instancesSet`, `clientToken`, `instanceState`);
/// docs.aws.amazon.com/AWSEC2/latest/APIReference/API_CreateKeyPair.html (`keyMaterial`: "an
/// unencrypted PEM encoded RSA or ED25519 private key"). Checked 2026-11-30 (lookup answer and
/// secret fields 2026-12-02).
pub fn aws_ec2() -> Contract {
    Contract::new("aws-ec2", KeyPlacement::form_body("ClientToken"))
        .max_key_len(64)
        .replay(Replay::CurrentState)
        .rule(
            Rule::new(
                StatusMatch::range(400, 499),
                EvidenceClass::ConflictMismatch,
            )
            .xml("Code", "IdempotentParameterMismatch")
            .reason("IdempotentParameterMismatch: the token was used with other parameters"),
        )
        .lookup(Lookup::ListByReference {
            url_template: "?Action=DescribeInstances&Version=2016-11-15&Filter.1.Name=client-token&Filter.1.Value.1={idempotency_key}".to_owned(),
            items_pointer: Some("/DescribeInstancesResponse/reservationSet/item".to_owned()),
            reference_pointer: Some("/instancesSet/item/clientToken".to_owned()),
            reference: "{idempotency_key}".to_owned(),
            answer: LookupAnswer {
                format: AnswerFormat::Xml,
                status: Some("/instancesSet/item/instanceState/name".to_owned()),
                remote_ref: Some("/instancesSet/item/instanceId".to_owned()),
                succeeded: Some(
                    EC2_LAUNCHED_STATES.iter().map(|s| (*s).to_owned()).collect(),
                ),
                // `pending` is a launch that ran, not one still being decided.
                processing: Some(Vec::new()),
                ..LookupAnswer::default()
            },
        })
        .settle_secs(300)
        .secret_response_field("keyMaterial")
}

/// The states of an EC2 instance that a launch found by `DescribeInstances` can be in: each
/// means the launch ran (read as success by the [`aws_ec2`] lookup).
pub const EC2_LAUNCHED_STATES: &[&str] = &[
    "pending",
    "running",
    "stopping",
    "stopped",
    "shutting-down",
    "terminated",
];

/// Google Cloud APIs following AIP-155. Name: `google-aip155`.
///
/// - Key: `requestId`, a UUID (the all-zero UUID is rejected; ours are random v4), as a query
///   parameter (`?requestId=...`, as Compute Engine takes it). For APIs that take it in the
///   body, use `.key(KeyPlacement::json_body("/requestId"))`. At most 36 characters.
/// - Retention: many services guarantee at least 60 minutes: 3600 s (check your service).
/// - Replay: [`Replay::CurrentState`]: a duplicate returns the earlier response or the current
///   resource state.
/// - Rules (AIP-194 retry advice, by `error.status`): `UNAVAILABLE` → `Unknown`, the one status
///   retried automatically (a same-key replay is safe); `DEADLINE_EXCEEDED`, `INTERNAL` and
///   `UNKNOWN` → `Unknown` and never retried blindly: reconcile. None of them proves the request
///   did not run, so none is `NotExecuted`.
/// - Lookup: [`Lookup::SameKeyReplay`] inside the 60 minutes.
///
/// Sources: google.aip.dev/155, google.aip.dev/194. Checked 2026-11-30.
pub fn google_aip155() -> Contract {
    let mut c = Contract::new("google-aip155", KeyPlacement::query("requestId"))
        .max_key_len(36)
        .retention_secs(HOUR)
        .replay(Replay::CurrentState)
        .rule(
            Rule::new(StatusMatch::range(500, 599), EvidenceClass::Unknown)
                .body("/error/status", "UNAVAILABLE")
                .reason("UNAVAILABLE (AIP-194: the one status retried automatically)"),
        );
    for status in ["DEADLINE_EXCEEDED", "INTERNAL", "UNKNOWN"] {
        c = c.rule(
            Rule::new(StatusMatch::range(400, 599), EvidenceClass::Unknown)
                .body("/error/status", status)
                .reason(format!("{status} (AIP-194: never retried automatically)")),
        );
    }
    c.lookup(Lookup::SameKeyReplay)
}

/// The IETF HTTPAPI `Idempotency-Key` header draft. Name: `ietf-draft`.
///
/// - Key: header `Idempotency-Key`, an RFC 8941 sf-string, so quoted: `Idempotency-Key: "8e03..."`.
///   No length limit is given; 64 characters is assumed.
/// - Missing key: 400 (`Rejected`). Same key with another payload: 422 (`Conflict { Mismatch }`).
///   Same key while the first request still runs: 409 (`Conflict { InFlight }`).
/// - Replay: after completion the server returns the earlier result, success or error:
///   [`Replay::StoredFirstResponse`].
/// - Retention: published by each resource ("the resource publishes its expiry"), so unknown
///   here.
/// - Remote reference: `/id` is taken when present, but success does not require it.
/// - Lookup: [`Lookup::SameKeyReplay`] (the earlier result is returned).
///
/// Source: datatracker.ietf.org/doc/draft-ietf-httpapi-idempotency-key-header (draft -07,
/// October 2025, expired). Checked 2026-11-30.
pub fn ietf_draft() -> Contract {
    Contract::new(
        "ietf-draft",
        KeyPlacement::Header {
            name: "Idempotency-Key".to_owned(),
            format: KeyFormat::Quoted,
        },
    )
    .replay(Replay::StoredFirstResponse)
    .rule(Rule::new(400, EvidenceClass::Rejected).reason(
        "missing or malformed Idempotency-Key, or invalid request (draft, \"Error Scenarios\")",
    ))
    .rule(
        Rule::new(422, EvidenceClass::ConflictMismatch)
            .reason("Idempotency-Key reused with another payload (draft, \"Error Scenarios\")"),
    )
    .rule(Rule::new(409, EvidenceClass::ConflictInFlight).reason(
        "a request with this Idempotency-Key is still being processed (draft, \"Error Scenarios\")",
    ))
    .remote_ref(RemoteRef::optional("/id"))
    .lookup(Lookup::SameKeyReplay)
}

/// A vendor with no outbound idempotency (Twilio-like). Name: `no-idempotency`.
///
/// - Key: none is sent ([`KeyPlacement::Omitted`]). Twilio's `I-Twilio-Idempotency-Token` is
///   sent BY Twilio on its webhooks, not honoured on requests: a retried SMS or call can
///   duplicate.
/// - Replay: [`Replay::Unsafe`]: never replayed automatically. Only proof that an attempt did
///   not execute allows a resend.
/// - Rules:
///   1. 429 with error code 20429 → `NotExecuted`: "never processed, always safe to retry";
///      `Retry-After`, given on some endpoints, sets the delay.
///   2. 500 with error code 20500 → `Unknown`: a 500 on send may have executed.
/// - Lookup: none documented ([`Lookup::Unavailable`]): an unknown outcome goes to manual
///   review, unless you configure a lookup your vendor does offer.
///
/// Source: twilio.com/docs/api/errors/20429 and twilio.com/docs/api/errors/20500.
/// Checked 2026-11-30.
pub fn no_idempotency() -> Contract {
    Contract::new("no-idempotency", KeyPlacement::Omitted)
        .rule(
            Rule::new(429, EvidenceClass::NotExecuted)
                .body("/code", "20429")
                .reason("20429: never processed, safe to retry"),
        )
        .rule(
            Rule::new(500, EvidenceClass::Unknown)
                .body("/code", "20500")
                .reason("20500: the request may have executed"),
        )
        .remote_ref(RemoteRef::optional("/sid"))
        .lookup(Lookup::Unavailable)
}

/// GitHub's REST API: no idempotency, rate-limit signals only. Name: `github`.
///
/// - Key: none is sent; replay [`Replay::Unsafe`].
/// - Rules: a 403 or 429 with `x-ratelimit-remaining: 0` → `Unknown`, with the hint taken from
///   `x-ratelimit-reset` (epoch seconds), and a 403 carrying `Retry-After` (a secondary limit) →
///   `Unknown` with that hint. Without these rules a rate-limited 403 would be a final
///   `Rejected` (pitfall 5). GitHub does not document that a rate-limited request was not
///   executed, so it is not `NotExecuted`. A secondary limit without `Retry-After` cannot be
///   told from a permission error by its headers: it stays `Rejected`; wait at least 60 s
///   before asking again.
/// - Lookup: none described ([`Lookup::Unavailable`]).
///
/// Source: github/docs `rate-limits-for-the-rest-api.md`. Checked 2026-11-30.
pub fn github() -> Contract {
    Contract::new("github", KeyPlacement::Omitted)
        .rule(
            Rule::new(403, EvidenceClass::Unknown)
                .header("x-ratelimit-remaining", "0")
                .reason("primary rate limit; wait until x-ratelimit-reset"),
        )
        .rule(
            Rule::new(429, EvidenceClass::Unknown)
                .header("x-ratelimit-remaining", "0")
                .reason("primary rate limit; wait until x-ratelimit-reset"),
        )
        .rule(
            Rule::new(403, EvidenceClass::Unknown)
                .header("retry-after", "*")
                .reason("secondary rate limit; honour Retry-After"),
        )
        .remote_ref(RemoteRef::optional("/id"))
        .lookup(Lookup::Unavailable)
}

/// Whether a contract's digest keeps an EC2 launch's zone in the operation identity: a full
/// digest does (the zone is in the body bytes), a field digest must name every pointer of
/// [`EC2_SCOPE_POINTERS`]. Returns the missing pointers.
pub fn ec2_scope_missing(digest: &PayloadDigest) -> Vec<&'static str> {
    match digest {
        PayloadDigest::Full => Vec::new(),
        PayloadDigest::Fields(fields) => EC2_SCOPE_POINTERS
            .iter()
            .copied()
            .filter(|p| !fields.iter().any(|f| f == p))
            .collect(),
    }
}
