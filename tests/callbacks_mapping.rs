//! Built-in callback mappings turn realistic vendor payloads (written from the vendors' docs)
//! into the right evidence, matcher and account.
#![cfg(feature = "callbacks")]

use std::time::SystemTime;

use http::StatusCode;
use recoverable_write::Evidence;
use recoverable_write::callbacks::{
    AccountTenants, CallbackMapping, DeliveryOutcome, MatchBy, Matcher, ParseError, ParsedEvent,
    VerifiedDelivery, batch_status, parse,
};
use recoverable_write::{OperationId, Tenant};
use serde_json::{Value, json};

fn delivered(body: &Value) -> VerifiedDelivery {
    // These tests exercise parsing; verification has its own tests.
    VerifiedDelivery::new("test", body.to_string(), Some(SystemTime::now()))
}

fn one(mapping: &CallbackMapping, body: Value) -> ParsedEvent {
    let mut events = parse(mapping, &delivered(&body)).unwrap();
    assert_eq!(events.len(), 1);
    events.remove(0)
}

fn stripe_pi(event_id: &str, event_type: &str, status: &str) -> Value {
    json!({
        "id": event_id,
        "object": "event",
        "account": "acct_1032D82eZvKYlo2C",
        "api_version": "2024-06-20",
        "created": 1_680_064_028,
        "livemode": false,
        "pending_webhooks": 1,
        "request": {"id": "req_1", "idempotency_key": "0e0fe4b3-3bfb-4b5e-8c34-4d2a4c0e9f4a"},
        "type": event_type,
        "data": {"object": {
            "id": "pi_3MtwBwLkdIwHu7ix28a3tqPa",
            "object": "payment_intent",
            "amount": 2000,
            "currency": "usd",
            "status": status,
            "last_payment_error": if status == "requires_payment_method" {
                json!({"code": "card_declined", "decline_code": "insufficient_funds"})
            } else { Value::Null },
            "metadata": {"operation_id": "op-7"}
        }}
    })
}

#[test]
fn stripe_payment_intent_events() {
    let m = CallbackMapping::stripe();
    let e = one(
        &m,
        stripe_pi("evt_1", "payment_intent.succeeded", "succeeded"),
    );
    assert_eq!(e.event_id, "evt_1");
    assert_eq!(e.event_type, "payment_intent.succeeded");
    assert_eq!(
        e.matcher,
        Some(Matcher {
            by: MatchBy::OperationId,
            value: "op-7".into()
        })
    );
    assert_eq!(e.account.as_deref(), Some("acct_1032D82eZvKYlo2C"));
    assert_eq!(
        e.evidence,
        Some(Evidence::Succeeded {
            remote_ref: Some("pi_3MtwBwLkdIwHu7ix28a3tqPa".into())
        })
    );

    let e = one(
        &m,
        stripe_pi(
            "evt_2",
            "payment_intent.payment_failed",
            "requires_payment_method",
        ),
    );
    // Issue 27 item 5: not final (the same PaymentIntent may still succeed), and the create
    // applied: the PaymentIntent exists. Never a rejection.
    assert_eq!(
        e.evidence,
        Some(Evidence::Succeeded {
            remote_ref: Some("pi_3MtwBwLkdIwHu7ix28a3tqPa".into())
        })
    );

    let e = one(
        &m,
        stripe_pi("evt_4", "payment_intent.canceled", "canceled"),
    );
    assert_eq!(
        e.evidence,
        Some(Evidence::Succeeded {
            remote_ref: Some("pi_3MtwBwLkdIwHu7ix28a3tqPa".into())
        })
    );

    // Processing names its PaymentIntent: recorded, so a later event by reference finds it.
    let e = one(
        &m,
        stripe_pi("evt_3", "payment_intent.processing", "processing"),
    );
    assert_eq!(
        e.evidence,
        Some(Evidence::Processing {
            retry_after: None,
            remote_ref: Some("pi_3MtwBwLkdIwHu7ix28a3tqPa".into())
        })
    );
}

/// Issue 27 item 5: a built-in mapping reads a failure as final (`rejected`) only where the
/// vendor documents it final, and none of the four vendors documents one in the sources the
/// crate relies on. A refusal that may still turn into a success is inconclusive.
#[test]
fn no_builtin_mapping_reads_a_failure_as_final() {
    for m in [
        CallbackMapping::stripe(),
        CallbackMapping::adyen(),
        CallbackMapping::square(),
        CallbackMapping::paypal(),
    ] {
        assert!(m.rejected.is_empty(), "{}: {:?}", m.vendor, m.rejected);
    }
    // A mapping of one's own still can, for a vendor that documents it (the fake vendor does).
    let own = CallbackMapping::from_toml(
        r#"
vendor = "acme"
event_id = ["/id"]
event_type = "/type"
matchers = [{ pointer = "/op", by = "operation_id" }]
rejected = ["order.refused"]
inconclusive = ["order.declined"]
"#,
    )
    .unwrap();
    let event = |ty: &str| json!({"id": "e1", "type": ty, "op": "op-7"});
    assert_eq!(
        one(&own, event("order.refused")).evidence,
        Some(Evidence::Rejected {
            reason: "order.refused".into()
        })
    );
    assert_eq!(
        one(&own, event("order.declined")).evidence,
        Some(Evidence::unknown("order.declined; not final at the vendor"))
    );
}

#[test]
fn stripe_charge_events_point_at_their_payment_intent() {
    let m = CallbackMapping::stripe();
    let charge = |ty: &str, status: &str| {
        json!({
            "id": "evt_ch", "object": "event", "type": ty,
            "data": {"object": {
                "id": "ch_3MmlLrLkdIwHu7ix0snN0B15", "object": "charge",
                "payment_intent": "pi_3MmlLrLkdIwHu7ix0uke3Ezy",
                "status": status, "failure_code": "card_declined", "metadata": {}
            }}
        })
    };
    let e = one(&m, charge("charge.succeeded", "succeeded"));
    // No metadata: the PaymentIntent id is what the operation is found by.
    assert_eq!(
        e.matcher,
        Some(Matcher {
            by: MatchBy::RemoteRef,
            value: "pi_3MmlLrLkdIwHu7ix0uke3Ezy".into()
        })
    );
    assert_eq!(
        e.evidence,
        Some(Evidence::Succeeded {
            remote_ref: Some("pi_3MmlLrLkdIwHu7ix0uke3Ezy".into())
        })
    );
    assert_eq!(e.account, None);
    // A failed charge proves nothing about the PaymentIntent: ignored, still deduplicable.
    let e = one(&m, charge("charge.failed", "failed"));
    assert_eq!(e.evidence, None);
    assert_eq!(e.event_id, "evt_ch");
}

fn adyen_item(psp: &str, success: &str, reason: &str) -> Value {
    json!({"NotificationRequestItem": {
        "additionalData": {"hmacSignature": "ignored-here"},
        "amount": {"currency": "EUR", "value": 1130},
        "eventCode": "AUTHORISATION",
        "eventDate": "2026-11-30T12:00:00+01:00",
        "merchantAccountCode": "TestMerchant",
        "merchantReference": "op-7",
        "operations": ["CANCEL", "CAPTURE", "REFUND"],
        "paymentMethod": "visa",
        "pspReference": psp,
        "reason": reason,
        "success": success
    }})
}

#[test]
fn adyen_batch_of_two_items_gives_two_events() {
    let body = json!({
        "live": "false",
        "notificationItems": [
            adyen_item("7914073381342284", "true", "033899:1111:03/2030"),
            adyen_item("8815073381342285", "false", "Refused"),
        ]
    });
    let events = parse(&CallbackMapping::adyen(), &delivered(&body)).unwrap();
    assert_eq!(events.len(), 2);
    assert_eq!(events[0].event_id, "7914073381342284:AUTHORISATION:true");
    assert_eq!(
        events[0].evidence,
        Some(Evidence::Succeeded {
            remote_ref: Some("7914073381342284".into())
        })
    );
    assert_eq!(events[0].account.as_deref(), Some("TestMerchant"));
    assert_eq!(
        events[0].matcher,
        Some(Matcher {
            by: MatchBy::OperationId,
            value: "op-7".into()
        })
    );
    assert_eq!(events[1].event_id, "8815073381342285:AUTHORISATION:false");
    // Issue 27 item 5: Adyen may send the event again with another outcome: a refusal is not
    // final, so it proves nothing (the reason is kept for the reviewer).
    assert_eq!(
        events[1].evidence,
        Some(Evidence::unknown(
            "AUTHORISATION: Refused; not final at the vendor"
        ))
    );
}

#[test]
fn adyen_modifications_are_ignored_and_an_empty_batch_is_an_error() {
    let mut item = adyen_item("9915073381342286", "true", "");
    item["NotificationRequestItem"]["eventCode"] = json!("CAPTURE");
    item["NotificationRequestItem"]["originalReference"] = json!("7914073381342284");
    let events = parse(
        &CallbackMapping::adyen(),
        &delivered(&json!({"live": "false", "notificationItems": [item]})),
    )
    .unwrap();
    assert_eq!(events[0].evidence, None);
    assert_eq!(events[0].event_id, "9915073381342286:CAPTURE:true");
    assert_eq!(
        parse(
            &CallbackMapping::adyen(),
            &delivered(&json!({"live": "false", "notificationItems": []}))
        ),
        Err(ParseError::NoItems {
            pointer: "/notificationItems".into()
        })
    );
}

fn square(event_id: &str, ty: &str, status: &str) -> Value {
    json!({
        "merchant_id": "6SSW7HV8K2ST5",
        "type": ty,
        "event_id": event_id,
        "created_at": "2026-11-30T12:00:00.000Z",
        "data": {
            "type": "payment",
            "id": "KkAkhdMsgzn59SM8A89WgKwekxLZY",
            "object": {"payment": {
                "id": "KkAkhdMsgzn59SM8A89WgKwekxLZY",
                "amount_money": {"amount": 100, "currency": "USD"},
                "status": status,
                "reference_id": "op-7",
                "location_id": "S8GWD5R9QB376",
                "version": 3
            }}
        }
    })
}

#[test]
fn square_payment_events_by_status() {
    let m = CallbackMapping::square();
    let e = one(
        &m,
        square(
            "13b867cf-db3d-4b1c-90b6-2f32a9d78124",
            "payment.updated",
            "COMPLETED",
        ),
    );
    assert_eq!(e.event_id, "13b867cf-db3d-4b1c-90b6-2f32a9d78124");
    assert_eq!(
        e.evidence,
        Some(Evidence::Succeeded {
            remote_ref: Some("KkAkhdMsgzn59SM8A89WgKwekxLZY".into())
        })
    );
    assert_eq!(e.account.as_deref(), Some("6SSW7HV8K2ST5"));
    assert_eq!(
        e.matcher,
        Some(Matcher {
            by: MatchBy::OperationId,
            value: "op-7".into()
        })
    );
    // Not documented as final: inconclusive, never a rejection.
    assert_eq!(
        one(&m, square("e2", "payment.updated", "FAILED")).evidence,
        Some(Evidence::unknown(
            "payment.updated: FAILED; not final at the vendor"
        ))
    );
    assert_eq!(
        one(&m, square("e3", "payment.created", "APPROVED")).evidence,
        Some(Evidence::Processing {
            retry_after: None,
            remote_ref: Some("KkAkhdMsgzn59SM8A89WgKwekxLZY".into())
        })
    );
    // Canceled: neither proven success nor proven no-effect; left to a human.
    assert_eq!(
        one(&m, square("e4", "payment.updated", "CANCELED")).evidence,
        None
    );
}

#[test]
fn paypal_capture_events() {
    let m = CallbackMapping::paypal();
    let capture = |id: &str, ty: &str, status: &str| {
        json!({
            "id": id,
            "create_time": "2026-11-30T12:00:00.000Z",
            "resource_type": "capture",
            "event_type": ty,
            "summary": "Payment completed for EUR 10.00",
            "resource": {
                "id": "42311647XV020574X",
                "amount": {"currency_code": "EUR", "value": "10.00"},
                "final_capture": true,
                "status": status,
                "custom_id": "op-7",
                "status_details": if status == "PENDING" { json!({"reason": "PENDING_REVIEW"}) } else { Value::Null }
            }
        })
    };
    let e = one(
        &m,
        capture(
            "WH-58D329510W468432D-8HN650336L201105X",
            "PAYMENT.CAPTURE.COMPLETED",
            "COMPLETED",
        ),
    );
    assert_eq!(e.event_id, "WH-58D329510W468432D-8HN650336L201105X");
    assert_eq!(
        e.evidence,
        Some(Evidence::Succeeded {
            remote_ref: Some("42311647XV020574X".into())
        })
    );
    assert_eq!(
        e.matcher,
        Some(Matcher {
            by: MatchBy::OperationId,
            value: "op-7".into()
        })
    );
    assert_eq!(e.account, None);
    // UNCONFIRMED that a denied capture never moves funds: inconclusive.
    assert_eq!(
        one(&m, capture("WH-2", "PAYMENT.CAPTURE.DENIED", "DECLINED")).evidence,
        Some(Evidence::unknown(
            "PAYMENT.CAPTURE.DENIED: DECLINED; not final at the vendor"
        ))
    );
    assert_eq!(
        one(&m, capture("WH-3", "PAYMENT.CAPTURE.PENDING", "PENDING")).evidence,
        Some(Evidence::Processing {
            retry_after: None,
            remote_ref: Some("42311647XV020574X".into())
        })
    );
}

#[test]
fn an_unknown_event_type_is_ignored_but_keeps_its_event_id() {
    let e = one(
        &CallbackMapping::stripe(),
        stripe_pi("evt_9", "customer.created", "n/a"),
    );
    assert_eq!(e.event_id, "evt_9");
    assert_eq!(e.event_type, "customer.created");
    assert_eq!(e.evidence, None);
}

#[test]
fn a_delivery_without_an_event_id_is_an_error() {
    let mut body = stripe_pi("evt_1", "payment_intent.succeeded", "succeeded");
    body.as_object_mut().unwrap().remove("id");
    assert_eq!(
        parse(&CallbackMapping::stripe(), &delivered(&body)),
        Err(ParseError::MissingEventId {
            index: 0,
            pointer: "/id".into()
        })
    );
    let mut item = adyen_item("7914073381342284", "true", "");
    item["NotificationRequestItem"]
        .as_object_mut()
        .unwrap()
        .remove("pspReference");
    assert!(matches!(
        parse(
            &CallbackMapping::adyen(),
            &delivered(&json!({"notificationItems": [adyen_item("1", "true", ""), item]}))
        ),
        Err(ParseError::MissingEventId { index: 1, .. })
    ));
    assert_eq!(
        parse(
            &CallbackMapping::stripe(),
            &VerifiedDelivery::new("test", "not json", None)
        ),
        Err(ParseError::NotJson)
    );
}

#[test]
fn a_mapping_loads_from_toml_and_refuses_unknown_fields() {
    let toml = r#"
        vendor = "tickets"
        event_id = ["/event/id"]
        event_type = "/event/type"
        status = "/ticket/status"
        account = "/tenant"
        remote_ref = ["/ticket/id"]
        matchers = [
            { pointer = "/ticket/operation_id", by = "operation_id" },
            { pointer = "/ticket/idempotency_key", by = "idempotency_key" },
        ]
        succeeded = ["ticket.created", { event_type = "ticket.updated", status = "SUCCEEDED" }]
        rejected = [{ event_type = "ticket.updated", status = "REJECTED" }]
        processing = [{ event_type = "ticket.updated", status = "PROCESSING" }]
    "#;
    let m = CallbackMapping::from_toml(toml).unwrap();
    let body = json!({
        "event": {"id": "ev-1", "type": "ticket.updated"},
        "tenant": "tenant-a",
        "ticket": {"id": "W731", "status": "SUCCEEDED", "idempotency_key": "k-1"}
    });
    let e = one(&m, body);
    assert_eq!(
        e.matcher,
        Some(Matcher {
            by: MatchBy::IdempotencyKey,
            value: "k-1".into()
        })
    );
    assert_eq!(
        e.evidence,
        Some(Evidence::Succeeded {
            remote_ref: Some("W731".into())
        })
    );
    // JSON round trip of every built-in.
    for b in [
        CallbackMapping::stripe(),
        CallbackMapping::adyen(),
        CallbackMapping::square(),
        CallbackMapping::paypal(),
    ] {
        let back = CallbackMapping::from_json(&serde_json::to_string(&b).unwrap()).unwrap();
        assert_eq!(back, b);
    }
    let typo = toml.replace("remote_ref =", "remote_reff =");
    assert!(CallbackMapping::from_toml(&typo).is_err());
}

#[test]
fn accounts_map_to_tenants_without_falling_back_for_unknown_accounts() {
    let t: AccountTenants = toml::from_str(
        r#"
        default_tenant = "tenant-default"
        [accounts]
        acct_A = "tenant-a"
        "#,
    )
    .unwrap();
    assert_eq!(t.tenant_for(Some("acct_A")), Some(Tenant::new("tenant-a")));
    assert_eq!(t.tenant_for(Some("acct_FOREIGN")), None);
    assert_eq!(t.tenant_for(None), Some(Tenant::new("tenant-default")));
}

#[test]
fn delivery_outcomes_answer_the_vendor() {
    let op = OperationId::new("op-7");
    for (o, status) in [
        (
            DeliveryOutcome::Applied {
                operation_id: op.clone(),
            },
            StatusCode::OK,
        ),
        (DeliveryOutcome::Duplicate, StatusCode::OK),
        (DeliveryOutcome::Late { operation_id: op }, StatusCode::OK),
        (
            DeliveryOutcome::Quarantined {
                why: "no operation".into(),
            },
            StatusCode::OK,
        ),
        (DeliveryOutcome::Ignored, StatusCode::OK),
        (
            DeliveryOutcome::Unverified {
                why: "forged".into(),
            },
            StatusCode::UNAUTHORIZED,
        ),
        (
            DeliveryOutcome::Unparseable {
                why: "no id".into(),
            },
            StatusCode::BAD_REQUEST,
        ),
        (
            DeliveryOutcome::StoreUnavailable,
            StatusCode::SERVICE_UNAVAILABLE,
        ),
    ] {
        assert_eq!(o.status(), status, "{}", o.label());
    }
}

#[test]
fn a_batch_answers_retry_if_any_event_needs_it() {
    let ok = DeliveryOutcome::Duplicate;
    assert_eq!(
        batch_status(&[ok.clone(), DeliveryOutcome::Ignored]),
        StatusCode::OK
    );
    assert_eq!(
        batch_status(&[ok.clone(), DeliveryOutcome::StoreUnavailable]),
        StatusCode::SERVICE_UNAVAILABLE
    );
    assert_eq!(
        batch_status(&[ok, DeliveryOutcome::Unparseable { why: "x".into() }]),
        StatusCode::BAD_REQUEST
    );
    assert_eq!(batch_status(&[]), StatusCode::BAD_REQUEST);
}
