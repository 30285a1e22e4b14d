//! Pages of list results: `{key: [...], nextCursor}`, and the opaque cursor `tools/list` and the
//! gateway's lists hand out (an offset into the list). A leaf of `mcp`.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde_json::{Map, Value, json};

use crate::jsonrpc::RpcError;

/// One page of a list, as `{key: [...], nextCursor}`: `page_size` items from the offset the
/// request's cursor names, each shown as `show` writes it.
pub fn page<T>(
    items: Vec<T>,
    key: &str,
    params: &Map<String, Value>,
    page_size: usize,
    show: impl Fn(T) -> Value,
) -> Result<Value, RpcError> {
    let total = items.len();
    let offset = match params.get("cursor") {
        None | Some(Value::Null) => 0,
        Some(Value::String(cursor)) => decode_cursor(cursor)
            .filter(|offset| *offset <= total)
            .ok_or_else(|| RpcError::invalid_params("params.cursor is not a cursor this server gave out"))?,
        Some(_) => return Err(RpcError::invalid_params("params.cursor must be a string")),
    };
    let end = offset.saturating_add(page_size).min(total);
    let page: Vec<Value> = items.into_iter().skip(offset).take(end - offset).map(show).collect();
    let mut result = json!({ key: page });
    if end < total {
        result["nextCursor"] = json!(encode_cursor(end));
    }
    Ok(result)
}

fn encode_cursor(offset: usize) -> String {
    URL_SAFE_NO_PAD.encode(format!("offset:{offset}"))
}

fn decode_cursor(cursor: &str) -> Option<usize> {
    let bytes = URL_SAFE_NO_PAD.decode(cursor).ok()?;
    std::str::from_utf8(&bytes).ok()?.strip_prefix("offset:")?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursors_round_trip_and_reject_forgeries() {
        assert_eq!(decode_cursor(&encode_cursor(50)), Some(50));
        assert_eq!(decode_cursor("not-base64!"), None);
        assert_eq!(decode_cursor(&URL_SAFE_NO_PAD.encode("page:2")), None);
    }
}
