//! Reading bodies on the write path: bounded, by a deadline, and without a copy when the body
//! came in one frame.

use bytes::Bytes;
use http_body::Body;
use http_body_util::{BodyExt, Limited};
use tower::BoxError;

/// `read`'s output, or `Err(())` if `deadline` passes first. Unlike `timeout_at`, no timer
/// is registered when `read` is ready at once (a small response's body usually arrives with
/// its head): the timer is made on the first poll that finds `read` pending.
pub(super) async fn read_by<F: Future>(
    deadline: tokio::time::Instant,
    read: F,
) -> Result<F::Output, ()> {
    use std::task::Poll;
    let mut read = std::pin::pin!(read);
    // Boxed: only a read that has to wait gets a timer.
    let mut timer: Option<std::pin::Pin<Box<tokio::time::Sleep>>> = None;
    std::future::poll_fn(|cx| {
        if let Poll::Ready(out) = read.as_mut().poll(cx) {
            return Poll::Ready(Ok(out));
        }
        timer
            .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(deadline)))
            .as_mut()
            .poll(cx)
            .map(|()| Err(()))
    })
    .await
}

/// The data of `body`, at most `limit` bytes (`Limited`'s errors beyond, as with
/// `Limited::new(body, limit).collect().await?.to_bytes()`; trailers are ignored).
pub(crate) async fn collect_limited<B>(body: B, limit: usize) -> Result<Bytes, BoxError>
where
    B: Body,
    B::Error: Into<BoxError>,
{
    collect(Limited::new(body, limit)).await
}

/// The data of `body`, trailers ignored. A body of one data frame, the common case, is returned
/// as that frame, without a copy or a frame queue (`BodyExt::collect` allocates one).
pub(crate) async fn collect<B: Body>(body: B) -> Result<Bytes, B::Error> {
    use bytes::{Buf, BufMut, BytesMut};
    let mut body = std::pin::pin!(body);
    let mut first: Option<Bytes> = None;
    let mut more: Option<BytesMut> = None;
    while let Some(frame) = body.frame().await {
        let Ok(mut data) = frame?.into_data() else {
            continue;
        };
        if !data.has_remaining() {
            continue;
        }
        let chunk = data.copy_to_bytes(data.remaining());
        match (&mut more, &first) {
            (Some(buf), _) => buf.put(chunk),
            (None, Some(prev)) => {
                let mut buf = BytesMut::with_capacity(prev.len() + chunk.len());
                buf.put_slice(prev);
                buf.put(chunk);
                more = Some(buf);
            }
            (None, None) => first = Some(chunk),
        }
    }
    Ok(match more {
        Some(buf) => buf.freeze(),
        None => first.unwrap_or_default(),
    })
}
