//! Built-in [`CallbackMapping`]s for the Stripe, Adyen, Square and PayPal profiles.
//!
//! Each names its sources and what in it is UNCONFIRMED; where the documentation leaves a
//! choice open, the mapping takes the reading that never claims a success it cannot prove (an
//! ignored event leaves the operation to lookups and review; a wrong success loses money) and
//! never claims a final failure the vendor does not document (a wrong rejection makes the
//! application write again, and pay twice when the first write succeeds after all).
//!
//! Each function's documentation has a table with one line per rule: the event, how it is
//! read, whether it is final, the source and the date it was checked. The sources are those of
//! `VENDOR_CONTRACTS.md` ("Callback events: which are final") and the vendors' own pages named
//! there. A success is final by nature (the write applied; a refund or a cancellation later is
//! another write), so the column matters for failures: a failure is read as a rejection only
//! where the vendor documents that the object cannot succeed any more, and otherwise as
//! *inconclusive* ([`CallbackMapping::inconclusive`]: recorded, nothing proven).

use super::mapping::{CallbackMapping, EventRule, MatchBy, MatchField, StatusRule};

fn ptrs(ps: &[&str]) -> Vec<String> {
    ps.iter().map(|p| (*p).to_owned()).collect()
}

fn types(ts: &[&str]) -> Vec<EventRule> {
    ts.iter()
        .map(|t| EventRule::Type((*t).to_owned()))
        .collect()
}

fn with_status(pairs: &[(&str, &str)]) -> Vec<EventRule> {
    pairs
        .iter()
        .map(|(t, s)| {
            EventRule::WithStatus(StatusRule {
                event_type: (*t).to_owned(),
                status: (*s).to_owned(),
            })
        })
        .collect()
}

fn field(pointer: &str, by: MatchBy) -> MatchField {
    MatchField {
        pointer: pointer.to_owned(),
        by,
    }
}

impl CallbackMapping {
    /// Stripe events (API v1 `Event` objects), verified with
    /// [`StripeSignature`](super::StripeSignature).
    ///
    /// Confirmed (docs.stripe.com/api/events, /webhooks): the event id is `id` (`evt_...`), the
    /// type `type`, the object `data.object`; Connect events carry `account`; Stripe may deliver
    /// an event more than once and in any order. The matcher prefers
    /// `data.object.metadata.operation_id` (the write carries it: `metadata[operation_id]` on
    /// the PaymentIntent, see the callbacks guide), then the PaymentIntent id
    /// (`data.object.payment_intent` on a charge, `data.object.id` on a PaymentIntent), then the
    /// charge id (legacy Charges API).
    ///
    /// The write these events speak about is the **create** of a PaymentIntent (or, legacy, of
    /// a charge). Every `payment_intent.*` event carries the PaymentIntent as `data.object`: it
    /// exists, so the create applied, whatever happens to the payment afterwards. So for this
    /// mapping `SUCCEEDED` means "the PaymentIntent `pi_…` exists" (as a synchronous `200` for
    /// a create without `confirm` already does), not "it is paid": read the PaymentIntent's
    /// `status`, or wait for `payment_intent.succeeded`, before shipping anything.
    ///
    /// | event | read as | final | source | checked |
    /// |---|---|---|---|---|
    /// | `payment_intent.succeeded` | succeeded, remote ref `pi_…` | yes: a succeeded PaymentIntent cannot change again | VENDOR_CONTRACTS "Callback events: which are final" (docs.stripe.com/payments/paymentintents/lifecycle) | 2026-12-02 |
    /// | `payment_intent.payment_failed` | succeeded, remote ref `pi_…`: the create applied | the create: yes. The payment: **no**, the declined attempt leaves the PaymentIntent in `requires_payment_method` and the documented next step confirms the same PaymentIntent again, which may succeed | VENDOR_CONTRACTS "Callback events: which are final" (stripe.dev Terminal SDK `ConfirmPaymentIntentError` / `ProcessPaymentError`; docs.stripe.com/terminal/payments/collect-card-payment) | 2026-12-02 |
    /// | `payment_intent.canceled` | succeeded, remote ref `pi_…`: the create applied | yes: a canceled PaymentIntent cannot change again | VENDOR_CONTRACTS "Callback events: which are final" | 2026-12-02 |
    /// | `payment_intent.processing` | processing, remote ref `pi_…` (recorded, so later events by reference find it) | no | docs.stripe.com/api/events/types | 2026-12-02 |
    /// | `charge.succeeded` | succeeded, remote ref the PaymentIntent's (else the charge's) | yes: money moved | docs.stripe.com/api/events/types | 2026-12-02 |
    /// | `charge.pending` | processing | no | docs.stripe.com/api/events/types | 2026-12-02 |
    /// | `charge.failed` | ignored: one PaymentIntent may have a failed charge and then a succeeded one | no | VENDOR_CONTRACTS "Callback events: which are final" | 2026-12-02 |
    ///
    /// Why `payment_intent.payment_failed` is a success of the create and not `rejected`: a
    /// rejection says the write had no effect, so the application writes again under a new
    /// intent; when the customer then completes the first PaymentIntent, they pay twice. Why
    /// not `processing` either: the create is finished (only the payment is open), a lookup of
    /// the same PaymentIntent answers "succeeded" anyway, and a PaymentIntent the customer
    /// abandons would sit in `PROCESSING` until the window ends and a person is asked about
    /// something the vendor already answered. A later event that contradicts what was
    /// recorded (a success after `REJECTED`, another PaymentIntent for the same operation)
    /// raises an alarm ([`Notice::Contradiction`](crate::Notice::Contradiction)).
    ///
    /// Whether a charge carries its PaymentIntent's metadata: UNCONFIRMED; the fallback to
    /// `data.object.payment_intent` covers it.
    pub fn stripe() -> Self {
        Self {
            vendor: "stripe".into(),
            items: None,
            event_id: ptrs(&["/id"]),
            event_type: "/type".into(),
            status: None,
            matchers: vec![
                field("/data/object/metadata/operation_id", MatchBy::OperationId),
                field("/data/object/payment_intent", MatchBy::RemoteRef),
                field("/data/object/id", MatchBy::RemoteRef),
            ],
            remote_ref: ptrs(&["/data/object/payment_intent", "/data/object/id"]),
            account: Some("/account".into()),
            reason: ptrs(&[
                "/data/object/last_payment_error/code",
                "/data/object/failure_code",
            ]),
            // One line per rule of the table above.
            succeeded: types(&[
                "payment_intent.succeeded",
                "payment_intent.payment_failed",
                "payment_intent.canceled",
                "charge.succeeded",
            ]),
            rejected: Vec::new(),
            processing: types(&["payment_intent.processing", "charge.pending"]),
            inconclusive: Vec::new(),
        }
    }

    /// Adyen standard notifications (JSON), verified with [`AdyenHmac`](super::AdyenHmac).
    ///
    /// Confirmed (docs.adyen.com/development-resources/webhooks): one delivery batches several
    /// `notificationItems[].NotificationRequestItem` (every one is returned, in order);
    /// `eventCode` `AUTHORISATION` with `success` `"true"` is an authorised payment, `"false"` a
    /// refused or failed one with `reason`; `pspReference` is Adyen's reference,
    /// `merchantReference` yours, `merchantAccountCode` the account; Adyen redelivers until it
    /// gets `[accepted]`.
    ///
    /// | event | read as | final | source | checked |
    /// |---|---|---|---|---|
    /// | `AUTHORISATION`, `success` `"true"` | succeeded, remote ref `pspReference` | yes: the payment was authorised | docs.adyen.com/development-resources/webhooks | 2026-12-02 |
    /// | `AUTHORISATION`, `success` `"false"` | inconclusive, the `reason` kept | **no**: Adyen may send the same event again with another outcome, and no Adyen page we found says a refused authorisation is final (VENDOR_CONTRACTS: confirm before reading it as final; UNCONFIRMED) | VENDOR_CONTRACTS "Callback events: which are final"; docs.adyen.com/development-resources/webhooks | 2026-12-02 |
    /// | anything else (`CAPTURE`, `REFUND`, ...) | ignored: its `pspReference` is the modification's, not the payment's | - | docs.adyen.com/development-resources/webhooks | 2026-12-02 |
    ///
    /// A refused authorisation therefore leaves the operation as it was (with the refusal in
    /// its evidence): a later `success` `"true"` still resolves it, and with neither a lookup
    /// nor a later event a person decides when the recovery window ends. It is never
    /// `REJECTED`, which would tell the application to pay again.
    ///
    /// Conservative readings:
    /// - Adyen sends no event id. The id is `pspReference:eventCode:success` (UNCONFIRMED as
    ///   Adyen's own dedupe key; `success` is part of it because Adyen may send the same event
    ///   again with another outcome, which must not be swallowed as a duplicate).
    /// - The matcher prefers `merchantReference` as the operation id (the contract must send the
    ///   operation id as the merchant reference), then `pspReference`.
    pub fn adyen() -> Self {
        const I: &str = "/NotificationRequestItem";
        let p = |s: &str| format!("{I}{s}");
        Self {
            vendor: "adyen".into(),
            items: Some("/notificationItems".into()),
            event_id: vec![p("/pspReference"), p("/eventCode"), p("/success")],
            event_type: p("/eventCode"),
            status: Some(p("/success")),
            matchers: vec![
                field(&p("/merchantReference"), MatchBy::OperationId),
                field(&p("/pspReference"), MatchBy::RemoteRef),
            ],
            remote_ref: vec![p("/pspReference")],
            account: Some(p("/merchantAccountCode")),
            reason: vec![p("/reason")],
            succeeded: with_status(&[("AUTHORISATION", "true")]),
            rejected: Vec::new(),
            processing: Vec::new(),
            inconclusive: with_status(&[("AUTHORISATION", "false")]),
        }
    }

    /// Square `payment.created` / `payment.updated` events, verified with
    /// [`SquareSignature`](super::SquareSignature).
    ///
    /// Confirmed (developer.squareup.com/docs/webhooks, /reference/square/webhooks): `event_id`
    /// is the idempotency value to dedupe on, `type` the event type, `merchant_id` the account,
    /// `data.id` the payment id, `data.object.payment.status` one of `APPROVED`, `PENDING`,
    /// `COMPLETED`, `CANCELED`, `FAILED`.
    ///
    /// | event (`payment.created` or `payment.updated`) | read as | final | source | checked |
    /// |---|---|---|---|---|
    /// | status `COMPLETED` | succeeded, remote ref the payment id | yes: the payment completed | developer.squareup.com/docs/payments-api/webhooks | 2026-12-02 |
    /// | status `APPROVED` or `PENDING` | processing, remote ref the payment id | no (`APPROVED` is final for a delayed-capture payment, but nothing was captured yet) | developer.squareup.com/reference/square/objects/Payment | 2026-12-02 |
    /// | status `FAILED` | inconclusive, the status kept | **not documented**: Square lists `FAILED` among a payment's statuses without saying it cannot change, and VENDOR_CONTRACTS has no Square callback facts (UNCONFIRMED) | developer.squareup.com/reference/square/objects/Payment | 2026-12-02 |
    /// | status `CANCELED` | ignored: the payment was created and then voided, neither a clean success nor a proof that the write had no effect; a person decides | - | developer.squareup.com/reference/square/objects/Payment | 2026-12-02 |
    ///
    /// The matcher prefers `data.object.payment.reference_id` as the operation id (the contract
    /// must send it), then the payment id. Square does not echo the idempotency key.
    pub fn square() -> Self {
        let s = |t: &'static str, st: &'static str| (t, st);
        Self {
            vendor: "square".into(),
            items: None,
            event_id: ptrs(&["/event_id"]),
            event_type: "/type".into(),
            status: Some("/data/object/payment/status".into()),
            matchers: vec![
                field("/data/object/payment/reference_id", MatchBy::OperationId),
                field("/data/id", MatchBy::RemoteRef),
            ],
            remote_ref: ptrs(&["/data/id", "/data/object/payment/id"]),
            account: Some("/merchant_id".into()),
            reason: ptrs(&["/data/object/payment/status"]),
            succeeded: with_status(&[
                s("payment.created", "COMPLETED"),
                s("payment.updated", "COMPLETED"),
            ]),
            rejected: Vec::new(),
            processing: with_status(&[
                s("payment.created", "APPROVED"),
                s("payment.updated", "APPROVED"),
                s("payment.created", "PENDING"),
                s("payment.updated", "PENDING"),
            ]),
            inconclusive: with_status(&[
                s("payment.created", "FAILED"),
                s("payment.updated", "FAILED"),
            ]),
        }
    }

    /// PayPal `PAYMENT.CAPTURE.*` events (Orders v2 / Payments v2). There is no built-in
    /// verifier (see [`PayPalUnsupported`](super::PayPalUnsupported)).
    ///
    /// Confirmed (developer.paypal.com/api/rest/webhooks/event-names): the event id is `id`
    /// (`WH-...`), the type `event_type`, the capture `resource` with `id`, `status` and the
    /// `custom_id` the merchant set.
    ///
    /// | event | read as | final | source | checked |
    /// |---|---|---|---|---|
    /// | `PAYMENT.CAPTURE.COMPLETED` | succeeded, remote ref the capture id | yes: the funds were captured | developer.paypal.com/api/rest/webhooks/event-names | 2026-12-02 |
    /// | `PAYMENT.CAPTURE.PENDING` | processing, remote ref the capture id | no | developer.paypal.com/api/rest/webhooks/event-names | 2026-12-02 |
    /// | `PAYMENT.CAPTURE.DENIED`, `PAYMENT.CAPTURE.DECLINED` | inconclusive, the reason kept | **not documented**: UNCONFIRMED that a denied or declined capture never moves funds, and VENDOR_CONTRACTS has no PayPal callback facts | developer.paypal.com/api/rest/webhooks/event-names | 2026-12-02 |
    ///
    /// Conservative readings:
    /// - No account field: PayPal events do not name the receiving merchant in a stable field
    ///   (UNCONFIRMED), so the tenant comes from the endpoint's configuration.
    /// - The matcher prefers `resource.custom_id` as the operation id, then the capture id.
    pub fn paypal() -> Self {
        Self {
            vendor: "paypal".into(),
            items: None,
            event_id: ptrs(&["/id"]),
            event_type: "/event_type".into(),
            status: None,
            matchers: vec![
                field("/resource/custom_id", MatchBy::OperationId),
                field("/resource/id", MatchBy::RemoteRef),
            ],
            remote_ref: ptrs(&["/resource/id"]),
            account: None,
            reason: ptrs(&["/resource/status_details/reason", "/resource/status"]),
            succeeded: types(&["PAYMENT.CAPTURE.COMPLETED"]),
            rejected: Vec::new(),
            processing: types(&["PAYMENT.CAPTURE.PENDING"]),
            inconclusive: types(&["PAYMENT.CAPTURE.DENIED", "PAYMENT.CAPTURE.DECLINED"]),
        }
    }
}
