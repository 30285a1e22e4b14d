//! A browser without a browser engine: cookies, form posts and redirects over plain HTTP, a few
//! flows through gatehouse's pages, and readers of those pages.

use reqwest::StatusCode;
use serde_json::Value;

/// A browser: keeps cookies, follows no redirects, and can carry an identity header (as a
/// reverse proxy would add it).
pub struct Browser {
    http: reqwest::Client,
    cookies: std::sync::Mutex<Vec<(String, String)>>,
    identity: Vec<(String, String)>,
}

pub struct Page {
    pub status: StatusCode,
    pub headers: reqwest::header::HeaderMap,
    pub body: String,
}

impl Page {
    pub fn location(&self) -> String {
        self.headers
            .get("location")
            .and_then(|v| v.to_str().ok())
            .expect("a Location header")
            .to_owned()
    }

    /// The value of the page's hidden `csrf` field.
    pub fn csrf(&self) -> String {
        let start = self.body.find("name=\"csrf\" value=\"").expect("a csrf field") + "name=\"csrf\" value=\"".len();
        self.body[start..].split('"').next().expect("value").to_owned()
    }
}

impl Browser {
    pub fn new() -> Self {
        Self {
            http: reqwest::Client::builder()
                .redirect(reqwest::redirect::Policy::none())
                .build()
                .expect("client"),
            cookies: std::sync::Mutex::new(Vec::new()),
            identity: Vec::new(),
        }
    }

    /// A browser whose requests carry `header: value` (header identity mode).
    pub fn as_user(header: &str, value: &str) -> Self {
        Self::new().with_header(header, value)
    }

    /// This browser, its requests carrying `header: value` too (a proxy's groups header, say).
    pub fn with_header(mut self, header: &str, value: &str) -> Self {
        self.identity.push((header.to_owned(), value.to_owned()));
        self
    }

    /// This browser with a cookie already in its jar (a session an authentication service set).
    pub fn with_cookie(self, name: &str, value: &str) -> Self {
        self.cookies
            .lock()
            .expect("cookies")
            .push((name.to_owned(), value.to_owned()));
        self
    }

    pub fn cookie_header(&self) -> String {
        let cookies = self.cookies.lock().expect("cookies");
        cookies
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join("; ")
    }

    async fn send(&self, request: reqwest::RequestBuilder) -> Page {
        let mut request = request.header("cookie", self.cookie_header());
        for (name, value) in &self.identity {
            request = request.header(name.as_str(), value.as_str());
        }
        let response = request.send().await.expect("browser request");
        let status = response.status();
        let headers = response.headers().clone();
        {
            let mut cookies = self.cookies.lock().expect("cookies");
            for set in headers.get_all("set-cookie").iter().filter_map(|v| v.to_str().ok()) {
                let pair = set.split(';').next().unwrap_or("");
                if let Some((name, value)) = pair.split_once('=') {
                    cookies.retain(|(k, _)| k != name);
                    if !value.is_empty() {
                        cookies.push((name.to_owned(), value.to_owned()));
                    }
                }
            }
        }
        let body = response.text().await.unwrap_or_default();
        Page { status, headers, body }
    }

    pub async fn get(&self, url: &str) -> Page {
        self.send(self.http.get(url)).await
    }

    pub async fn post_form(&self, url: &str, origin: &str, fields: &[(&str, &str)]) -> Page {
        let body = url::form_urlencoded::Serializer::new(String::new())
            .extend_pairs(fields)
            .finish();
        let request = self
            .http
            .post(url)
            .header("content-type", "application/x-www-form-urlencoded")
            .header("origin", origin)
            .body(body);
        self.send(request).await
    }

    /// Submits a page's form as pressing its button `action` does, with the page's token `csrf`.
    pub async fn press(&self, url: &str, origin: &str, action: &str, csrf: &str) -> Page {
        self.post_form(url, origin, &[("action", action), ("csrf", csrf)]).await
    }

    /// Opens an elicitation URL and presses Continue: returns the provider's authorize URL.
    pub async fn continue_to_provider(&self, connect_url: &str) -> String {
        let page = self.get(connect_url).await;
        assert_eq!(page.status, StatusCode::OK, "connect page: {}", page.body);
        let origin = url::Url::parse(connect_url)
            .expect("url")
            .origin()
            .ascii_serialization();
        let redirect = self.press(connect_url, &origin, "continue", &page.csrf()).await;
        assert_eq!(redirect.status, StatusCode::SEE_OTHER, "continue: {}", redirect.body);
        redirect.location()
    }

    /// At the provider: returns where it sends the browser back (the callback URL).
    pub async fn authorize(&self, authorize_url: &str) -> String {
        let page = self.get(authorize_url).await;
        assert_eq!(page.status, StatusCode::FOUND, "authorize: {}", page.body);
        page.location()
    }

    /// The whole sign-in: connect page, Continue, provider, callback. Returns the final page.
    pub async fn sign_in(&self, connect_url: &str) -> Page {
        let authorize = self.continue_to_provider(connect_url).await;
        let callback = self.authorize(&authorize).await;
        self.get(&callback).await
    }
}

/// The query parameters of `url`, by name.
pub fn query_of(url: &str) -> std::collections::HashMap<String, String> {
    url::Url::parse(url)
        .expect("a URL")
        .query_pairs()
        .into_owned()
        .collect()
}

/// Every cookie `page` sets has `Path=path` (the path prefix of gatehouse's public URL, `/`
/// without one); it sets at least one.
pub fn assert_cookie_path(page: &Page, path: &str) {
    let set: Vec<&str> = page
        .headers
        .get_all("set-cookie")
        .iter()
        .map(|v| v.to_str().expect("ascii"))
        .collect();
    assert!(!set.is_empty(), "the page sets a cookie");
    for cookie in set {
        assert!(cookie.contains(&format!("; Path={path};")), "{cookie}");
    }
}

/// The footer every built-in page has links to /connections under `prefix` (the path prefix of
/// gatehouse's public URL).
pub fn assert_footer_under(page: &Page, prefix: &str) {
    assert!(
        page.body.contains(&format!("<a href=\"{prefix}/connections\">")),
        "{}",
        page.body
    );
}

/// The page's form posts to `action` (a path under gatehouse's public URL).
pub fn assert_form_action(page: &Page, action: &str) {
    assert!(page.body.contains(&format!("action=\"{action}\"")), "{}", page.body);
}

/// The text of a form page's description, which must arrive escaped (no raw markup or quotes).
pub fn description(body: &str) -> String {
    let start = body.find("<p class=\"description\">").expect("a description") + "<p class=\"description\">".len();
    let shown = &body[start..start + body[start..].find("</p>").expect("end")];
    assert!(
        !shown.contains('<') && !shown.contains('"'),
        "the description is escaped: {shown}"
    );
    unescape(shown)
}

/// Decodes the entities pages are escaped with (`&#60;`, `&#34;`, ...; `&lt;` from `|e`).
pub fn unescape(text: &str) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(at) = rest.find('&') {
        out.push_str(&rest[..at]);
        rest = &rest[at..];
        let decoded = rest.find(';').and_then(|end| {
            let entity = &rest[1..end];
            let c = match entity {
                "amp" => Some('&'),
                "lt" => Some('<'),
                "gt" => Some('>'),
                "quot" => Some('"'),
                "apos" => Some('\''),
                _ => entity
                    .strip_prefix("#x")
                    .or_else(|| entity.strip_prefix("#X"))
                    .and_then(|hex| u32::from_str_radix(hex, 16).ok())
                    .or_else(|| entity.strip_prefix('#').and_then(|dec| dec.parse().ok()))
                    .and_then(char::from_u32),
            };
            c.map(|c| (c, end))
        });
        match decoded {
            Some((c, end)) => {
                out.push(c);
                rest = &rest[end + 1..];
            }
            None => {
                out.push('&');
                rest = &rest[1..];
            }
        }
    }
    out.push_str(rest);
    out
}

/// The landing page `page` lists exactly the tools of a `tools/list` answer (`listed`), each by
/// its name and with its description as the server defines it.
pub fn assert_lists_tools(page: &Page, listed: &Value) {
    let shown = unescape(&page.body);
    let tools = listed["tools"].as_array().expect("tools");
    assert_eq!(shown.matches("<dt>").count(), tools.len(), "{listed}: {}", page.body);
    for tool in tools {
        let name = tool["name"].as_str().expect("name");
        let description = tool["description"].as_str().expect("description");
        assert!(
            shown.contains(&format!("<dt><code>{name}</code>")),
            "{name} is not listed: {}",
            page.body
        );
        assert!(
            shown.contains(&format!("<dd>{description}</dd>")),
            "{name}'s description is not shown: {}",
            page.body
        );
    }
}

/// In a browser, confirms the payment that a [`super::pay_tool`] call with
/// [`super::pay_arguments`] waits for: opens its page at `url`, checks that it shows the
/// arguments, ticks the box and submits from `origin`; the page then says it is confirmed (not
/// saved: nothing is kept beyond the call).
pub async fn confirm_payment(url: &str, origin: &str) {
    let browser = Browser::new();
    let page = browser.get(url).await;
    assert_eq!(page.status, StatusCode::OK, "{}", page.body);
    assert_eq!(description(&page.body), "Pay 12.40 EUR to <b>ACME</b> & \"Sons\"?");
    let done = browser
        .post_form(
            url,
            origin,
            &[("csrf", &page.csrf()), ("action", "submit"), ("confirm", "true")],
        )
        .await;
    assert_eq!(done.status, StatusCode::OK, "{}", done.body);
    assert!(
        done.body.contains("<h1>Confirmed</h1>") && !done.body.contains("Saved"),
        "{}",
        done.body
    );
}
