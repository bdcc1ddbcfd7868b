//! Pagination as GitHub does it: `per_page` (default 30, at most 100) and `page`
//! (from 1) in the query, a `Link` header with `next`, `prev`, `first` and `last`.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::Value;

/// The query's `key`, decoded.
pub(crate) fn param(query: &str, key: &str) -> Option<String> {
    query.split('&').find_map(|pair| {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        (k == key).then(|| decode(v))
    })
}

fn decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < bytes.len() => {
                match std::str::from_utf8(&bytes[i + 1..i + 3]).ok().and_then(|h| u8::from_str_radix(h, 16).ok()) {
                    Some(b) => {
                        out.push(b);
                        i += 2;
                    }
                    None => out.push(b'%'),
                }
            }
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// One page of `items` as a JSON array, with its `Link` header.
pub(crate) fn page(items: Vec<Value>, base: &str, path: &str, query: &str) -> Response {
    let per_page = param(query, "per_page").and_then(|p| p.parse::<usize>().ok()).unwrap_or(30).clamp(1, 100);
    let page = param(query, "page").and_then(|p| p.parse::<usize>().ok()).unwrap_or(1).max(1);
    let last = items.len().div_ceil(per_page).max(1);
    let chunk: Vec<Value> = items.into_iter().skip((page - 1) * per_page).take(per_page).collect();
    let others: Vec<&str> =
        query.split('&').filter(|p| !p.is_empty() && !p.starts_with("page=") && !p.starts_with("per_page=")).collect();
    let link_to = |n: usize| {
        let mut q = others.join("&");
        if !q.is_empty() {
            q.push('&');
        }
        format!("<{base}{path}?{q}per_page={per_page}&page={n}>")
    };
    let mut links = Vec::new();
    if page < last {
        links.push(format!("{}; rel=\"next\"", link_to(page + 1)));
        links.push(format!("{}; rel=\"last\"", link_to(last)));
    }
    if page > 1 {
        links.push(format!("{}; rel=\"first\"", link_to(1)));
        links.push(format!("{}; rel=\"prev\"", link_to(page - 1)));
    }
    let mut response = (StatusCode::OK, axum::Json(Value::Array(chunk))).into_response();
    if !links.is_empty()
        && let Ok(value) = HeaderValue::from_str(&links.join(", "))
    {
        response.headers_mut().insert(header::LINK, value);
    }
    response
}
