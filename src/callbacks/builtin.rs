//! Built-in [`CallbackMapping`]s for the Stripe, Adyen, Square and PayPal profiles.
//!
//! Each names its sources and what in it is UNCONFIRMED; where the documentation leaves a
//! choice open, the mapping takes the reading that never claims a success it cannot prove (an
//! ignored event leaves the operation to lookups and review; a wrong success loses money).
//! Checked 2026-11-30.

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
    /// Conservative readings:
    /// - `payment_intent.succeeded` and `charge.succeeded` mean succeeded (both mean money moved);
    ///   the remote ref is the PaymentIntent id when there is one.
    /// - `payment_intent.payment_failed` means rejected. UNCONFIRMED as final: a PaymentIntent
    ///   stays open and the customer may retry it; an application that lets them should move it
    ///   to `processing`.
    /// - `charge.failed` is ignored: one PaymentIntent may have a failed charge and then a
    ///   succeeded one, so a failed charge proves nothing about the write.
    /// - `payment_intent.processing` and `charge.pending` mean processing.
    /// - Whether a charge carries its PaymentIntent's metadata: UNCONFIRMED; the fallback to
    ///   `data.object.payment_intent` covers it.
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
            succeeded: types(&["payment_intent.succeeded", "charge.succeeded"]),
            rejected: types(&["payment_intent.payment_failed"]),
            processing: types(&["payment_intent.processing", "charge.pending"]),
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
    /// Conservative readings:
    /// - Adyen sends no event id. The id is `pspReference:eventCode:success` (UNCONFIRMED as
    ///   Adyen's own dedupe key; `success` is part of it because Adyen may send the same event
    ///   again with another outcome, which must not be swallowed as a duplicate).
    /// - Only `AUTHORISATION` is mapped; modifications (`CAPTURE`, `REFUND`, ...) are ignored,
    ///   their `pspReference` being the modification's, not the payment's.
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
            rejected: with_status(&[("AUTHORISATION", "false")]),
            processing: Vec::new(),
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
    /// Conservative readings:
    /// - `COMPLETED` is succeeded, `FAILED` rejected, `APPROVED` and `PENDING` processing
    ///   (`APPROVED` is final for a delayed-capture payment, but nothing was captured yet).
    /// - `CANCELED` is ignored: the payment was created and then voided, which is neither a
    ///   clean success nor a proof that the write had no effect; a human decides.
    /// - The matcher prefers `data.object.payment.reference_id` as the operation id (the contract
    ///   must send it), then the payment id. Square does not echo the idempotency key.
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
            rejected: with_status(&[
                s("payment.created", "FAILED"),
                s("payment.updated", "FAILED"),
            ]),
            processing: with_status(&[
                s("payment.created", "APPROVED"),
                s("payment.updated", "APPROVED"),
                s("payment.created", "PENDING"),
                s("payment.updated", "PENDING"),
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
    /// Conservative readings:
    /// - `PAYMENT.CAPTURE.COMPLETED` succeeded; `PAYMENT.CAPTURE.DENIED` and
    ///   `PAYMENT.CAPTURE.DECLINED` rejected (UNCONFIRMED that a declined capture never moves
    ///   funds); `PAYMENT.CAPTURE.PENDING` processing.
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
            rejected: types(&["PAYMENT.CAPTURE.DENIED", "PAYMENT.CAPTURE.DECLINED"]),
            processing: types(&["PAYMENT.CAPTURE.PENDING"]),
        }
    }
}
