//! Accept-header negotiation, as kube-apiserver does it: which encoding (JSON, YAML,
//! protobuf) and which conversion (`as=Table`, `as=PartialObjectMetadata[List]`) an answer
//! takes.
//!
//! Sources, k8s.io/apiserver:
//! - `pkg/endpoints/handlers/negotiation/negotiate.go`: `NegotiateMediaTypeOptions` walks
//!   the Accept clauses in goautoneg's order and takes the first one that names a media
//!   type the endpoint serves and whose parameters it allows; no match is `406`
//!   (`errors.go`: "only the following media types are accepted: …"). An empty Accept
//!   takes the endpoint's first media type (JSON).
//! - `pkg/endpoints/handlers/rest.go`, `RequestScope.AllowsMediaTypeTransform`: no
//!   conversion → the endpoint's standard serializers (built-in types: JSON, YAML,
//!   protobuf; custom resources: JSON, YAML); `as=Table` → JSON or YAML only, and only
//!   where the endpoint has a table convertor (all do); `as=PartialObjectMetadata` and
//!   `as=PartialObjectMetadataList` → any encoding, custom resources included; the
//!   conversion's group/version must be `meta.k8s.io/v1` or `meta.k8s.io/v1beta1`.
//! - `stream=watch` is allowed only on encodings with a stream serializer (JSON,
//!   protobuf; not YAML).
//!
//! goautoneg (`github.com/munnerz/goautoneg`, vendored by apimachinery): clauses split on
//! `,`, parameters on `;`, `q` parsed as a float (default 1), other parameters kept with
//! their values trimmed; a bare `*` is `*/*`; a range without `/` is dropped. Clauses are
//! sorted by q, then concrete types before wildcards; Go's sort is an insertion sort below
//! 12 elements, so equal clauses keep their order, as here (a stable sort).
//!
//! Both sides use this: the simulator answers (and refuses) as the apiserver does, and the
//! gateway decides which representation the cache must produce, forwarding whatever it
//! does not produce itself (YAML, refusals) so that the upstream gives the exact answer.

/// An encoding the apiserver serves, in the order of its serializers
/// (`CodecFactory.SupportedMediaTypes`: JSON, YAML, protobuf).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Encoding {
    Json,
    Yaml,
    Protobuf,
}

impl Encoding {
    pub fn media_type(self) -> &'static str {
        match self {
            Encoding::Json => "application/json",
            Encoding::Yaml => "application/yaml",
            Encoding::Protobuf => "application/vnd.kubernetes.protobuf",
        }
    }

    fn parts(self) -> (&'static str, &'static str) {
        match self {
            Encoding::Json => ("application", "json"),
            Encoding::Yaml => ("application", "yaml"),
            Encoding::Protobuf => ("application", "vnd.kubernetes.protobuf"),
        }
    }

    /// Whether the encoding has a stream serializer (a watch can use it).
    pub fn streams(self) -> bool {
        !matches!(self, Encoding::Yaml)
    }

    /// The Content-Type of a watch stream in this encoding: the apiserver's JSON watch is
    /// plain `application/json`; the others carry `;stream=watch` (handlers/watch.go).
    pub fn watch_content_type(self) -> &'static str {
        match self {
            Encoding::Json => "application/json",
            Encoding::Yaml => "application/yaml",
            Encoding::Protobuf => "application/vnd.kubernetes.protobuf;stream=watch",
        }
    }
}

/// `meta.k8s.io` version of a conversion target.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MetaVersion {
    V1,
    V1beta1,
}

impl MetaVersion {
    pub fn as_str(self) -> &'static str {
        match self {
            MetaVersion::V1 => "v1",
            MetaVersion::V1beta1 => "v1beta1",
        }
    }

    /// `meta.k8s.io/v1`.
    pub fn api_version(self) -> &'static str {
        match self {
            MetaVersion::V1 => "meta.k8s.io/v1",
            MetaVersion::V1beta1 => "meta.k8s.io/v1beta1",
        }
    }
}

/// What the client asked the object to be turned into (`as=`, `g=`, `v=`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Conversion {
    Table(MetaVersion),
    PartialObjectMetadata(MetaVersion),
    PartialObjectMetadataList(MetaVersion),
}

impl Conversion {
    fn parse(kind: &str, group: &str, version: &str) -> Option<Self> {
        if group != "meta.k8s.io" {
            return None;
        }
        let v = match version {
            "v1" => MetaVersion::V1,
            "v1beta1" => MetaVersion::V1beta1,
            _ => return None,
        };
        match kind {
            "Table" => Some(Conversion::Table(v)),
            "PartialObjectMetadata" => Some(Conversion::PartialObjectMetadata(v)),
            "PartialObjectMetadataList" => Some(Conversion::PartialObjectMetadataList(v)),
            _ => None,
        }
    }

    pub fn version(self) -> MetaVersion {
        match self {
            Conversion::Table(v)
            | Conversion::PartialObjectMetadata(v)
            | Conversion::PartialObjectMetadataList(v) => v,
        }
    }
}

/// One clause of an Accept header, as goautoneg parses it.
#[derive(Debug, Clone, PartialEq)]
pub struct Clause {
    pub typ: String,
    pub sub_type: String,
    pub q: f64,
    /// Parameters other than `q`, in the order given (values trimmed).
    pub params: Vec<(String, String)>,
}

impl Clause {
    fn param(&self, key: &str) -> Option<&str> {
        // goautoneg keeps parameters in a map: a repeated key keeps its last value.
        self.params
            .iter()
            .rev()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
}

/// goautoneg's `ParseAccept`.
pub fn parse_accept(header: &str) -> Vec<Clause> {
    let mut out = Vec::new();
    for part in header.split(',') {
        let mut mrp = part.split(';');
        let media_range = mrp.next().unwrap_or("");
        let sp: Vec<&str> = media_range.split('/').collect();
        let typ = sp[0].trim_matches(' ');
        let (typ, sub_type) = match sp.len() {
            1 if typ == "*" => ("*".to_string(), "*".to_string()),
            2 => (typ.to_string(), sp[1].trim_matches(' ').to_string()),
            _ => continue,
        };
        let mut clause = Clause {
            typ,
            sub_type,
            q: 1.0,
            params: Vec::new(),
        };
        for param in mrp {
            let Some((token, value)) = param.split_once('=') else {
                continue;
            };
            let token = token.trim_matches(' ');
            if token == "q" {
                // strconv.ParseFloat(…, 32) with its error ignored: a bad q is 0.
                clause.q = value.parse::<f32>().map(f64::from).unwrap_or(0.0);
            } else {
                clause
                    .params
                    .push((token.to_string(), value.trim_matches(' ').to_string()));
            }
        }
        out.push(clause);
    }
    // accept_slice.Less: higher q first; then a concrete type before `*`; then a concrete
    // subtype before `*`. (Less is not a strict order for every pair; a stable insertion
    // sort with the same comparison is what Go runs for short slices.)
    let less = |a: &Clause, b: &Clause| {
        a.q > b.q || (a.typ != "*" && b.typ == "*") || (a.sub_type != "*" && b.sub_type == "*")
    };
    for i in 1..out.len() {
        let mut j = i;
        while j > 0 && less(&out[j], &out[j - 1]) {
            out.swap(j, j - 1);
            j -= 1;
        }
    }
    out
}

/// What an endpoint can serve.
#[derive(Debug, Clone, Copy)]
pub struct Endpoint {
    /// The type has protobuf (built-in types; not custom resources or aggregated types).
    pub protobuf: bool,
}

impl Endpoint {
    /// Built-in types (served by kube-apiserver itself).
    pub const BUILTIN: Endpoint = Endpoint { protobuf: true };
    /// Custom resources.
    pub const CUSTOM: Endpoint = Endpoint { protobuf: false };

    /// The negotiated serializer's media types: the request scope's serializer offers
    /// protobuf for custom resources too (for PartialObjectMetadata), restricted below.
    const SERIALIZERS: [Encoding; 3] = [Encoding::Json, Encoding::Yaml, Encoding::Protobuf];

    /// `AllowsMediaTypeTransform`.
    fn allows(&self, enc: Encoding, conversion: Option<Conversion>) -> bool {
        match conversion {
            None => enc != Encoding::Protobuf || self.protobuf,
            Some(Conversion::Table(_)) => matches!(enc, Encoding::Json | Encoding::Yaml),
            Some(_) => true,
        }
    }

    /// The media types a 406 lists: the negotiated serializer's (`MediaTypesForSerializer`).
    pub fn accepted_media_types(&self, stream: bool) -> String {
        let types: Vec<String> = Self::SERIALIZERS
            .iter()
            .filter(|e| !stream || e.streams())
            .map(|e| {
                if stream {
                    format!("{};stream=watch", e.media_type())
                } else {
                    e.media_type().to_string()
                }
            })
            .collect();
        types.join(", ")
    }
}

/// The outcome of negotiation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Negotiated {
    pub encoding: Encoding,
    pub conversion: Option<Conversion>,
    /// `pretty=1` in the media type.
    pub pretty: bool,
    /// `stream=watch` was named.
    pub stream_watch: bool,
}

impl Negotiated {
    /// Plain JSON, no conversion: what an empty Accept gets.
    pub const JSON: Negotiated = Negotiated {
        encoding: Encoding::Json,
        conversion: None,
        pretty: false,
        stream_watch: false,
    };
}

/// No Accept clause can be served: the apiserver's 406.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("only the following media types are accepted: {accepted}")]
pub struct NotAcceptable {
    pub accepted: String,
}

impl NotAcceptable {
    pub fn status(&self) -> crate::status::Status {
        crate::status::Status::new(406, "NotAcceptable", self.to_string())
    }
}

/// `NegotiateOutputMediaType` for gets, lists and the first step of a watch.
pub fn negotiate(accept: Option<&str>, endpoint: Endpoint) -> Result<Negotiated, NotAcceptable> {
    negotiate_clauses(accept, endpoint)
}

/// `NegotiateOutputMediaTypeStream`: a watch's stream serializer. It negotiates as for a
/// list and only then requires a stream serializer, so `application/yaml,application/json`
/// on a watch is refused (YAML wins the negotiation and cannot stream), not served JSON.
pub fn negotiate_stream(
    accept: Option<&str>,
    endpoint: Endpoint,
) -> Result<Negotiated, NotAcceptable> {
    match negotiate_clauses(accept, endpoint) {
        Ok(n) if n.encoding.streams() => Ok(n),
        _ => Err(NotAcceptable {
            accepted: endpoint.accepted_media_types(true),
        }),
    }
}

fn negotiate_clauses(
    accept: Option<&str>,
    endpoint: Endpoint,
) -> Result<Negotiated, NotAcceptable> {
    negotiate_restricted(accept, Restrictions::Scope(endpoint)).map_err(|()| NotAcceptable {
        accepted: endpoint.accepted_media_types(false),
    })
}

/// `negotiation.DefaultEndpointRestrictions`, which `responsewriters.ErrorNegotiated`
/// uses to write an error Status: no conversion (`as=`/`g=`/`v=` rule a clause out), no
/// `sv=`, `stream=watch` only where the encoding streams, and every serializer of the
/// request scope allowed (custom resources included: their scope's serializer has
/// protobuf, for PartialObjectMetadata). When this fails too, the apiserver writes the
/// Status with `WriteRawJSON` (indented JSON, no newline).
pub fn negotiate_error(accept: Option<&str>) -> Option<Negotiated> {
    negotiate_restricted(accept, Restrictions::Default).ok()
}

/// `negotiation.isPrettyPrint`: the `pretty` query parameter (`strconv.ParseBool`, a bad
/// value is false) decides when present and non-empty; otherwise a browser or
/// command-line User-Agent (`curl`, `Wget`, `Mozilla/5.0`) gets pretty output.
pub fn is_pretty_print(pretty_param: Option<&str>, user_agent: Option<&str>) -> bool {
    match pretty_param.filter(|p| !p.is_empty()) {
        Some(p) => matches!(p, "1" | "t" | "T" | "true" | "TRUE" | "True"),
        None => user_agent.is_some_and(|ua| {
            ua.starts_with("curl") || ua.starts_with("Wget") || ua.starts_with("Mozilla/5.0")
        }),
    }
}

/// A request's `Accept` header in its negotiated form, worked out once when the request
/// is parsed (`request::Parsed`): for each kind of endpoint (the cache's answers depend
/// only on whether the type has protobuf) and for an error Status. The gateway's handlers
/// and its forwarder read these instead of parsing the header again.
#[derive(Debug, Clone)]
pub struct Accept {
    /// The first `Accept` header, as Go's `Header.Get` reads it (None when absent or not
    /// visible ASCII).
    pub raw: Option<String>,
    builtin: Result<Negotiated, NotAcceptable>,
    custom: Result<Negotiated, NotAcceptable>,
    error: Option<Negotiated>,
}

impl Accept {
    pub fn new(raw: Option<String>) -> Self {
        let clauses = match raw.as_deref() {
            None | Some("") => Vec::new(),
            Some(h) => parse_accept(h),
        };
        let empty = raw.as_deref().unwrap_or("").is_empty();
        let scope = |endpoint: Endpoint| {
            if empty {
                return Ok(Negotiated::JSON);
            }
            negotiate_parsed(&clauses, Restrictions::Scope(endpoint)).map_err(|()| NotAcceptable {
                accepted: endpoint.accepted_media_types(false),
            })
        };
        let error = if empty {
            Some(Negotiated::JSON)
        } else {
            negotiate_parsed(&clauses, Restrictions::Default).ok()
        };
        Self {
            builtin: scope(Endpoint::BUILTIN),
            custom: scope(Endpoint::CUSTOM),
            error,
            raw,
        }
    }

    /// [`negotiate`] for `endpoint`.
    pub fn negotiate(&self, endpoint: Endpoint) -> Result<Negotiated, NotAcceptable> {
        if endpoint.protobuf {
            self.builtin.clone()
        } else {
            self.custom.clone()
        }
    }

    /// [`negotiate_stream`] for `endpoint`.
    pub fn negotiate_stream(&self, endpoint: Endpoint) -> Result<Negotiated, NotAcceptable> {
        match self.negotiate(endpoint) {
            Ok(n) if n.encoding.streams() => Ok(n),
            _ => Err(NotAcceptable {
                accepted: endpoint.accepted_media_types(true),
            }),
        }
    }

    /// [`negotiate_error`]: how an error Status is written to this client.
    pub fn for_errors(&self) -> Option<Negotiated> {
        self.error
    }
}

/// Whose restrictions a negotiation applies.
#[derive(Debug, Clone, Copy)]
enum Restrictions {
    /// A resource endpoint's request scope (`RequestScope.AllowsMediaTypeTransform` etc.).
    Scope(Endpoint),
    /// `DefaultEndpointRestrictions`.
    Default,
}

fn negotiate_restricted(
    accept: Option<&str>,
    restrictions: Restrictions,
) -> Result<Negotiated, ()> {
    let header = accept.unwrap_or("");
    if header.is_empty() {
        return Ok(Negotiated::JSON);
    }
    negotiate_parsed(&parse_accept(header), restrictions)
}

/// [`negotiate_restricted`] over clauses already parsed.
fn negotiate_parsed(clauses: &[Clause], restrictions: Restrictions) -> Result<Negotiated, ()> {
    for clause in clauses {
        for enc in Endpoint::SERIALIZERS {
            let (t, s) = enc.parts();
            // The three cases of negotiate.go: exact, `type/*`, `*/*`.
            let matches = (clause.typ == t && (clause.sub_type == s || clause.sub_type == "*"))
                || (clause.typ == "*" && clause.sub_type == "*");
            if !matches {
                continue;
            }
            if let Some(n) = accept_options(clause, enc, restrictions) {
                return Ok(n);
            }
        }
    }
    Err(())
}

/// `acceptMediaTypeOptions`: the clause's parameters against the endpoint.
fn accept_options(
    clause: &Clause,
    enc: Encoding,
    restrictions: Restrictions,
) -> Option<Negotiated> {
    let mut pretty = false;
    let mut stream_watch = false;
    let (mut kind, mut group, mut version, mut convert) = ("", "", "", false);
    for (k, v) in &clause.params {
        match k.as_str() {
            "as" => (kind, convert) = (v, true),
            "g" => (group, convert) = (v, true),
            "v" => (version, convert) = (v, true),
            "stream" => {
                // Only "watch" is allowed, and only where a stream serializer exists.
                if !v.is_empty() && (!enc.streams() || v != "watch") {
                    return None;
                }
                stream_watch = v == "watch";
            }
            // `sv`: the request scope allows only its meta group version (v1); the
            // default restrictions allow none.
            "sv" if !v.is_empty()
                && (v != "v1" || matches!(restrictions, Restrictions::Default)) =>
            {
                return None
            }
            "pretty" => pretty = v == "1",
            _ => {}
        }
    }
    // A repeated parameter keeps its last value (Go map).
    if convert {
        kind = clause.param("as").unwrap_or(kind);
        group = clause.param("g").unwrap_or(group);
        version = clause.param("v").unwrap_or(version);
    }
    let conversion = match (convert, restrictions) {
        (false, _) => None,
        // `AllowsMediaTypeTransform(…, gvk) { return gvk == nil }`.
        (true, Restrictions::Default) => return None,
        (true, Restrictions::Scope(_)) => Some(Conversion::parse(kind, group, version)?),
    };
    let allowed = match restrictions {
        Restrictions::Default => true,
        Restrictions::Scope(endpoint) => endpoint.allows(enc, conversion),
    };
    allowed.then_some(Negotiated {
        encoding: enc,
        conversion,
        pretty,
        stream_watch,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const CLIENT_GO_PROTO: &str = "application/vnd.kubernetes.protobuf,application/json";
    const METADATA_LIST: &str = "application/vnd.kubernetes.protobuf;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json";
    const KUBECTL_TABLE: &str = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json";

    fn n(accept: &str, ep: Endpoint) -> Result<Negotiated, NotAcceptable> {
        // The form parsed once agrees with the functions on the header, every way.
        let once = Accept::new(Some(accept.to_string()));
        assert_eq!(once.negotiate(ep), negotiate(Some(accept), ep), "{accept}");
        assert_eq!(
            once.negotiate_stream(ep),
            negotiate_stream(Some(accept), ep),
            "{accept}"
        );
        assert_eq!(once.for_errors(), negotiate_error(Some(accept)), "{accept}");
        negotiate(Some(accept), ep)
    }

    #[test]
    fn goautoneg_orders_by_q_then_concreteness() {
        let c = parse_accept("*/*;q=0.5, application/json;q=0.9, text/*, application/yaml");
        let names: Vec<String> = c
            .iter()
            .map(|c| format!("{}/{}", c.typ, c.sub_type))
            .collect();
        // Go's insertion sort with accept_slice.Less, worked by hand: yaml (q=1, concrete
        // subtype) passes text/* (q=1, wildcard subtype), and both pass json (q=0.9).
        assert_eq!(
            names,
            ["application/yaml", "text/*", "application/json", "*/*"]
        );
        // A bare `*` is */*; a range without a subtype is dropped; a bad q is 0.
        // (Less is not a strict order: a concrete type is "less" than `*/*` whatever the
        // q, so json with q=0 still moves before */* with q=1, as in Go.)
        let c = parse_accept("*, foo, application/json;q=x");
        assert_eq!(c.len(), 2);
        assert_eq!((c[1].typ.as_str(), c[1].sub_type.as_str()), ("*", "*"));
        assert_eq!((c[0].sub_type.as_str(), c[0].q), ("json", 0.0));
    }

    #[test]
    fn client_go_and_kubectl_shapes() {
        let proto = n(CLIENT_GO_PROTO, Endpoint::BUILTIN).unwrap();
        assert_eq!(
            (proto.encoding, proto.conversion),
            (Encoding::Protobuf, None)
        );
        // A custom resource has no protobuf: the JSON clause wins.
        let json = n(CLIENT_GO_PROTO, Endpoint::CUSTOM).unwrap();
        assert_eq!((json.encoding, json.conversion), (Encoding::Json, None));
        // Metadata informers, built-in or custom: protobuf PartialObjectMetadataList.
        for ep in [Endpoint::BUILTIN, Endpoint::CUSTOM] {
            let m = n(METADATA_LIST, ep).unwrap();
            assert_eq!(m.encoding, Encoding::Protobuf);
            assert_eq!(
                m.conversion,
                Some(Conversion::PartialObjectMetadataList(MetaVersion::V1))
            );
        }
        let t = n(KUBECTL_TABLE, Endpoint::CUSTOM).unwrap();
        assert_eq!(t.conversion, Some(Conversion::Table(MetaVersion::V1)));
        assert_eq!(t.encoding, Encoding::Json);
        assert_eq!(
            negotiate(None, Endpoint::BUILTIN).unwrap(),
            Negotiated::JSON
        );
        assert_eq!(
            negotiate(Some(""), Endpoint::CUSTOM).unwrap(),
            Negotiated::JSON
        );
    }

    #[test]
    fn refusals_are_the_apiservers() {
        let e = n("application/vnd.kubernetes.protobuf", Endpoint::CUSTOM).unwrap_err();
        assert_eq!(
            e.to_string(),
            "only the following media types are accepted: application/json, application/yaml, application/vnd.kubernetes.protobuf"
        );
        assert_eq!(e.status().code, 406);
        // Table has no protobuf form.
        assert!(n(
            "application/vnd.kubernetes.protobuf;as=Table;g=meta.k8s.io;v=v1",
            Endpoint::BUILTIN
        )
        .is_err());
        // Unknown targets and groups/versions.
        for bad in [
            "application/json;as=Foo;g=meta.k8s.io;v=v1",
            "application/json;as=Table;g=meta.k8s.io;v=v2",
            "application/json;as=Table;g=example.com;v=v1",
            "application/json;as=Table",
            "application/json;sv=v2",
            "application/json;stream=other",
            "text/html",
        ] {
            assert!(n(bad, Endpoint::BUILTIN).is_err(), "{bad}");
        }
        // YAML has no stream serializer.
        let e = negotiate_stream(Some("application/yaml"), Endpoint::BUILTIN).unwrap_err();
        assert_eq!(
            e.accepted,
            "application/json;stream=watch, application/vnd.kubernetes.protobuf;stream=watch"
        );
        assert!(negotiate(Some("application/yaml;stream=watch"), Endpoint::BUILTIN).is_err());
        // YAML wins the negotiation before the stream check, so JSON is not tried.
        assert!(
            negotiate_stream(Some("application/yaml,application/json"), Endpoint::BUILTIN).is_err()
        );
    }

    #[test]
    fn errors_negotiate_without_conversions() {
        // DefaultEndpointRestrictions: any as=/g=/v= rules a clause out, so a Table-only
        // Accept leaves the error writer nothing (WriteRawJSON); a plain clause after it
        // is taken.
        assert_eq!(negotiate_error(Some(KUBECTL_TABLE)), Some(Negotiated::JSON));
        assert_eq!(
            negotiate_error(Some("application/json;as=Table;g=meta.k8s.io;v=v1")),
            None
        );
        assert_eq!(negotiate_error(Some("text/html")), None);
        assert_eq!(negotiate_error(Some("application/json;sv=v1")), None);
        assert_eq!(negotiate_error(None), Some(Negotiated::JSON));
        // Every serializer is allowed, protobuf included (the error of a custom resource
        // asked in protobuf is written in protobuf).
        assert_eq!(
            negotiate_error(Some("application/vnd.kubernetes.protobuf"))
                .unwrap()
                .encoding,
            Encoding::Protobuf
        );
        assert_eq!(
            negotiate_error(Some("application/yaml")).unwrap().encoding,
            Encoding::Yaml
        );
        assert!(
            negotiate_error(Some("application/json;pretty=1"))
                .unwrap()
                .pretty
        );
    }

    #[test]
    fn pretty_print_as_is_pretty_print() {
        assert!(is_pretty_print(Some("true"), None));
        assert!(is_pretty_print(Some("1"), Some("kubectl/v1.37")));
        assert!(!is_pretty_print(Some("false"), Some("curl/8.5.0")));
        assert!(
            !is_pretty_print(Some("yes"), None),
            "ParseBool error is false"
        );
        assert!(is_pretty_print(Some(""), Some("curl/8.5.0")));
        assert!(is_pretty_print(None, Some("Mozilla/5.0 (X11)")));
        assert!(is_pretty_print(None, Some("Wget/1.21")));
        assert!(!is_pretty_print(None, Some("kubectl/v1.37")));
        assert!(!is_pretty_print(None, None));
    }

    #[test]
    fn wildcards_pick_the_first_serializer() {
        assert_eq!(
            n("*/*", Endpoint::BUILTIN).unwrap().encoding,
            Encoding::Json
        );
        assert_eq!(
            n("application/*", Endpoint::BUILTIN).unwrap().encoding,
            Encoding::Json
        );
        // q decides before order.
        assert_eq!(
            n(
                "application/json;q=0.5,application/vnd.kubernetes.protobuf",
                Endpoint::BUILTIN
            )
            .unwrap()
            .encoding,
            Encoding::Protobuf
        );
        let w = negotiate_stream(
            Some("application/vnd.kubernetes.protobuf;stream=watch"),
            Endpoint::BUILTIN,
        )
        .unwrap();
        assert!(w.stream_watch);
        assert_eq!(w.encoding, Encoding::Protobuf);
        assert!(
            n("application/json;pretty=1", Endpoint::BUILTIN)
                .unwrap()
                .pretty
        );
    }
}
