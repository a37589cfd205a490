//! The transport lookups and replays go through: the stack below the layer (the send-once
//! guard and the client), boxed once.

use bytes::Bytes;
use http::{Request, Response};
use http_body::Body;
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full};
use tower::util::BoxCloneSyncService;
use tower::{BoxError, Service, ServiceExt};

/// The service replays are sent through: the stack below the layer (guard, client).
pub(crate) type ReplayService =
    BoxCloneSyncService<Request<Full<Bytes>>, Response<UnsyncBoxBody<Bytes, BoxError>>, BoxError>;

/// `service` as the boxed stack lookups and replays go through.
pub(crate) fn boxed_transport<S, RB>(service: S) -> ReplayService
where
    S: Service<Request<Full<Bytes>>, Response = Response<RB>> + Clone + Send + Sync + 'static,
    S::Future: Send + 'static,
    S::Error: Into<BoxError>,
    RB: Body<Data = Bytes> + Send + 'static,
    RB::Error: Into<BoxError>,
{
    let svc = service
        .map_err(Into::into)
        .map_response(|res: Response<RB>| res.map(|b| b.map_err(Into::into).boxed_unsync()));
    BoxCloneSyncService::new(svc)
}
