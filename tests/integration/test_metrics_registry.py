"""/metrics and /status as one registry writes them: the families with their HELP and TYPE
lines and labels as documented, /status with the same fields, both showing the same counts,
counts from several workers summed without loss, and (when Debian's prometheus is installed)
`promtool check metrics` clean."""

import json

from harness import (complete, metrics_text, pool_yaml, prom_samples, promtool_clean, request,
                     status, wait_until)

FAMILIES = {  # name: (type, help)
    "accelnet_backend_present": ("gauge", "1 if the backend takes new requests as far as "
                                 "discovery goes: a fixed address, or one its name's DNS answer "
                                 "holds (0: an unused or draining slot of backends.discover)"),
    "accelnet_backend_up": ("gauge", "1 if the backend is up: as active health checks find it "
                            "when the pool has health:, else 0 from a failed connect until it "
                            "answers again"),
    "accelnet_backend_eligible": ("gauge", "1 if the backend could take a request now: up, not "
                                  "ejected or marked failed, and a slot free"),
    "accelnet_backend_ejected": ("gauge", "1 while the backend is out of rotation though up "
                                 "(outlier ejection or a failed connect's fail_timeout_ms)"),
    "accelnet_backend_slots": ("gauge", "request slots the backend has (max_concurrency; 0: no "
                               "limit); accelnet_backend_inflight are in use"),
    "accelnet_backend_weight": ("gauge", "the backend's weight: its config's, its SRV record's, "
                                "or what the admin API set"),
    "accelnet_backend_admin_state": ("gauge", "what the admin API made of the backend: 0 "
                                     "enabled, 1 draining, 2 disabled, 3 removing (no new "
                                     "requests but at 0; those in flight finish)"),
    "accelnet_maintenance": ("gauge", "1 while the proxy is in maintenance (admin API): new "
                             "requests are answered 503 with Retry-After, those in flight "
                             "finish"),
    "accelnet_backend_reported_load": ("gauge",
                                       "requests queued inside the backend, as it last reported"),
    "accelnet_backend_inflight": ("gauge", "requests in flight to the backend"),
    "accelnet_backend_latency_seconds": ("gauge",
                                         "peak-EWMA time to first byte, as balancing sees it"),
    "accelnet_backend_requests_total": ("counter", "requests sent to the backend"),
    "accelnet_backend_connect_failures_total": ("counter", "failed connects"),
    "accelnet_backend_retries_total": ("counter", "requests retried elsewhere"),
    "accelnet_backend_ejections_total": ("counter",
                                         "times outlier detection took the backend out"),
    "accelnet_backend_hedged_total": (
        "counter", "requests on this backend that were also sent to another (hedging)"),
    "accelnet_backend_hedge_wins_total": ("counter",
                                          "hedged copies on this backend that answered first"),
    "accelnet_backend_responses_total": ("counter", "responses by status class"),
    "accelnet_backend_tls_handshakes_total": (
        "counter", "full TLS handshakes with the backend (pools.tls)"),
    "accelnet_backend_tls_resumed_total": (
        "counter", "TLS handshakes with the backend that resumed a session"),
    "accelnet_backend_tls_failures_total": ("counter", "failed TLS handshakes with the backend"),
    "accelnet_backend_l4_connections_total": ("counter", "listen[].mode: tcp connections relayed "
                                              "to the backend"),
    "accelnet_backend_l4_bytes_total": ("counter", "bytes relayed through listen[].mode: tcp "
                                        "connections, by direction"),
    "accelnet_backend_engine_waiting": ("gauge", "requests waiting in the engine behind the "
                                        "backend, by its own metrics (pools.engine_metrics; "
                                        "all label sets summed)"),
    "accelnet_backend_engine_running": ("gauge", "requests running in the engine behind the "
                                        "backend, by its own metrics (pools.engine_metrics; "
                                        "all label sets summed)"),
    "accelnet_backend_engine_kv_usage_ratio": ("gauge", "how full the engine's KV cache is, 0 "
                                               "to 1, by its own metrics "
                                               "(pools.engine_metrics)"),
    "accelnet_backend_engine_scrapes_total": ("counter", "scrapes of the engine's metrics that "
                                              "were read"),
    "accelnet_backend_engine_scrape_failures_total": (
        "counter", "scrapes of the engine's metrics that failed (no answer, not 200, too large, "
        "not Prometheus text, none of the known gauges)"),
    "accelnet_backend_kv_events_total": ("counter", "KV-cache events of the backend applied to "
                                         "its prefix index, by kind (backends.kv_events)"),
    "accelnet_backend_kv_event_gaps_total": ("counter", "times the backend's KV-cache events "
                                             "lost their thread (a sequence gap, a reconnect): "
                                             "its prefix index was cleared"),
    "accelnet_backend_kv_events_malformed_total": ("counter", "KV-cache event messages of the "
                                                   "backend dropped as malformed"),
    "accelnet_backend_kv_events_blocks": ("gauge", "prompt blocks in the backend's KV cache by "
                                          "its KV-cache events (backends.kv_events; 0 "
                                          "without)"),
    "accelnet_backend_kv_events_pending": ("gauge", "prompt blocks balance: llm sent to the "
                                           "backend that its KV-cache events have not "
                                           "confirmed yet, counted as held for a few seconds "
                                           "(backends.kv_events; 0 without)"),
    "accelnet_backend_kv_events_next_seq": ("gauge", "the sequence number the backend's next "
                                            "KV-event batch should carry: one past the last "
                                            "batch applied whole (0 before the first); the "
                                            "engine's own count caught up with it means the "
                                            "index has seen all it said"),
    "accelnet_backend_kv_event_replays_total": ("counter", "replays the backend's engine was "
                                                "asked for after a gap in its KV-cache events "
                                                "(backends.kv_events_replay), by outcome: "
                                                "filled (the index kept), else it was cleared"),
    "accelnet_backend_ttfb_seconds": ("histogram",
                                      "request sent to response head (time to first token)"),
    "accelnet_backend_gap_seconds": ("histogram",
                                     "time between reads of a streamed response body"),
    "accelnet_backend_ttft_seconds": ("histogram", "request sent to the first streamed token "
                                      "event (SSE data with text), LLM routes"),
    "accelnet_backend_token_gap_seconds": ("histogram", "time between successive streamed token "
                                           "events, LLM routes"),
    "accelnet_backend_llm_ttft_base_seconds": ("gauge", "balance: llm: fitted time to first "
                                               "token with the whole prompt cached"),
    "accelnet_backend_llm_ttft_per_block_seconds": ("gauge", "balance: llm: fitted time to "
                                                    "first token added per prompt block not "
                                                    "cached"),
    "accelnet_backend_llm_work_seconds": ("gauge", "balance: llm: expected service time of the "
                                          "requests it serves for us now"),
    "accelnet_backend_llm_index_blocks": ("gauge", "balance: llm: prompt blocks its prefix "
                                          "cache is believed to hold"),
    "accelnet_backend_llm_prompt_blocks_total": ("counter", "balance: llm: prompt blocks of the "
                                                 "requests sent to it"),
    "accelnet_backend_llm_missed_blocks_total": ("counter", "balance: llm: ... of them not in "
                                                 "its prefix cache as far as we knew (1 - "
                                                 "missed/prompt: the expected hit share)"),
    "accelnet_llm_predict_decisions_total": ("counter", "balance: llm: decisions that sent a "
                                             "request to the backend, by why it won"),
    "accelnet_llm_predict_ttft_seconds": ("histogram", "balance: llm: the time to first token it "
                                          "expected of the backend, for each answer whose first "
                                          "body byte came"),
    "accelnet_llm_predict_measured_ttft_seconds": ("histogram", "balance: llm: ... and the time it "
                                                   "took: request sent to the response body's "
                                                   "first byte"),
    "accelnet_llm_predict_ttft_error_seconds": ("histogram", "balance: llm: how far apart the two "
                                                "were, either way"),
    "accelnet_llm_predict_reports_total": ("counter", "balance: llm: answers whose usage reported "
                                           "the engine's cached prompt tokens "
                                           "(prompt_tokens_details.cached_tokens)"),
    "accelnet_llm_predict_hit_blocks_total": ("counter", "balance: llm: prompt blocks it expected "
                                              "the backend's cache to hold, over those answers"),
    "accelnet_llm_predict_reported_hit_blocks_total": ("counter", "balance: llm: ... and the "
                                                       "blocks the engine reported cached "
                                                       "(cached_tokens x 4 bytes / "
                                                       "llm.block_bytes)"),
    "accelnet_pool_queue_wait_seconds": ("histogram",
                                         "time from queueing to a granted backend slot"),
    "accelnet_pool_queue_length": ("gauge", "requests waiting for a backend slot"),
    "accelnet_pool_unavailable_total": ("counter",
                                        "requests turned away with no backend to serve them"),
    "accelnet_pool_retries_denied_total": ("counter", "retries the retry budget turned down"),
    "accelnet_pool_session_hits_total": ("counter", "requests sent to their conversation's "
                                         "backend (pools.session)"),
    "accelnet_pool_session_moves_total": ("counter", "requests whose conversation's backend "
                                          "could not take them, sent elsewhere (the "
                                          "conversation moves)"),
    "accelnet_pool_spilled_in_total": ("counter", "requests moved here by a route's spillover"),
    "accelnet_pool_pd_prefills_total": ("counter", "prefill attempts of the pool's requests on its "
                                        "prefill pool (pools.disaggregation), retries "
                                        "included"),
    "accelnet_pool_pd_prefill_failures_total": ("counter", "prefill attempts that failed, by "
                                                "reason"),
    "accelnet_pool_pd_retries_total": ("counter", "failed prefills tried again on another "
                                       "prefill backend"),
    "accelnet_pool_pd_fallbacks_total": ("counter", "requests whose prefill failed for good, "
                                         "decoded in place (on_prefill_failure: decode_only)"),
    "accelnet_pool_pd_skipped_total": ("counter", "requests shorter than min_prompt_bytes, "
                                       "decoded in place without a prefill"),
    "accelnet_pool_pd_kv_params_total": ("counter", "decode requests sent with the KV-transfer "
                                         "parameters of their prefill (vllm: "
                                         "kv_transfer_params; sglang: bootstrap_*)"),
    "accelnet_pool_discovery_answers_total": ("counter", "DNS answers applied to the pool's "
                                              "discovered backends (backends.discover), empty "
                                              "ones included"),
    "accelnet_pool_discovery_failures_total": ("counter", "resolutions of a discovered name that "
                                               "failed (timeout, SERVFAIL, refused): the last "
                                               "answer was kept"),
    "accelnet_pool_discovery_dropped_total": ("counter", "addresses in a DNS answer left out for "
                                              "want of a free slot (backends.max_backends)"),
    "accelnet_pool_queue_enqueued_total": ("counter", "requests that waited in the queue (each "
                                           "leaves it as granted, displaced, timed out, spilled "
                                           "or withdrawn)"),
    "accelnet_pool_queue_granted_total": ("counter", "queued requests granted a backend slot"),
    "accelnet_pool_queue_timeouts_total": ("counter",
                                           "queued requests turned away after queue.timeout_ms"),
    "accelnet_pool_queue_overflows_total": ("counter", "requests that found the queue full "
                                            "(never enqueued, or taking a displaced request's "
                                            "place)"),
    "accelnet_pool_queue_displaced_total": ("counter", "queued requests pushed out of a full "
                                            "queue for a request of a tenant with fewer waiting"),
    "accelnet_pool_queue_spilled_total": ("counter",
                                          "queued requests moved on to the route's spillover pool"),
    "accelnet_pool_queue_withdrawn_total": ("counter",
                                            "queued requests whose client went away while they "
                                            "waited"),
    "accelnet_listener_shed_total": ("counter", "client connections closed as they were "
                                     "accepted, by the limit that turned them away"),
    "accelnet_buffer_bytes": ("gauge", "bytes of connection buffers lent out now, all workers "
                              "(limits.max_buffer_memory)"),
    "process_cpu_seconds_total": ("counter", "user and system CPU time spent, all threads"),
    "process_resident_memory_bytes": ("gauge", "resident memory size"),
    "process_virtual_memory_bytes": ("gauge", "virtual memory size"),
    "process_open_fds": ("gauge", "open file descriptors"),
    "process_max_fds": ("gauge", "most open file descriptors allowed (RLIMIT_NOFILE)"),
    "accelnet_event_loop": ("gauge", "1 for the back end the event loops run on (tune.io)"),
    "accelnet_access_log_dropped_total": ("counter", "access log lines dropped: a worker's ring "
                                          "was full or a write failed (access_log)"),
    "accelnet_config_generation": ("gauge", "the configuration serving new requests: 0 as "
                                   "started, one more per reload (SIGHUP)"),
    "accelnet_config_reloads_total": ("counter", "reloads that put a new configuration in use"),
    "accelnet_config_reload_failures_total": ("counter", "reloads refused (a bad file: the log "
                                              "says where); the running configuration stayed"),
    "accelnet_cache_bytes": ("gauge", "bytes the response cache holds (cache.memory)"),
    "accelnet_cache_objects": ("gauge", "responses the cache holds (and fills under way)"),
    "accelnet_cache_evictions_total": ("counter", "stored responses let go: for room (the "
                                       "eviction policy), purged or invalidated, replaced by a "
                                       "newer copy"),
    "accelnet_cluster_redis_up": ("gauge", "1 while the limits are shared through Redis "
                                  "(cluster), 0 while this instance enforces them alone"),
    "accelnet_cluster_instances": ("gauge", "live instances sharing the limits, as Redis last "
                                   "counted them"),
    "accelnet_cluster_syncs_total": ("counter",
                                     "syncs of the shared limits with Redis that went through"),
    "accelnet_cluster_sync_failures_total": ("counter", "syncs or connects to Redis that failed "
                                             "or timed out"),
    "accelnet_cluster_keys_synced_total": ("counter", "limit keys (route, limit, tenant) "
                                           "carried by the syncs"),
    "accelnet_cluster_prefixes_sent_total": ("counter", "prompts' first blocks sent to the other "
                                             "instances (balance: llm without kv_events)"),
    "accelnet_cluster_prefixes_received_total": ("counter", "the other instances' prompts taken "
                                                 "into this one's prefix indexes"),
    "accelnet_cluster_sessions_sent_total": ("counter", "sessions (pools.session) sent to the "
                                             "other instances"),
    "accelnet_cluster_sessions_received_total": ("counter", "the other instances' sessions taken "
                                                 "into this one's tables"),
    "accelnet_tunnels_open": ("gauge", "WebSocket tunnels open now (routes.websocket, "
                              "limits.max_tunnels)"),
    "accelnet_tunnel_bytes_total": ("counter", "bytes relayed through WebSocket tunnels, by "
                                    "direction"),
    "accelnet_tunnels_closed_total": ("counter", "WebSocket tunnels ended: closed by either side, "
                                      "idle past timeouts.tunnel_idle_ms, cut by a drain "
                                      "(timeouts.tunnel_drain_ms), or a failed read or write"),
    "accelnet_spliced_bytes_total": ("counter", "response body bytes relayed by splice(2), never "
                                     "copied through the proxy's buffers (tune.splice)"),
    "accelnet_http2_defences_total": ("counter", "times an HTTP/2 defence acted: a connection "
                                      "ended with GOAWAY ENHANCE_YOUR_CALM (rapid_reset, "
                                      "control_flood, continuation_flood), a header list "
                                      "refused 431 (header_list), a stream cut for a client "
                                      "that took none of its response (slow_reader), a "
                                      "connection sent GOAWAY as its stream ids ran out "
                                      "(stream_ids)"),
    "accelnet_client_requests_total": ("counter", "requests by the protocol the client spoke "
                                       "(HTTP/1.0, HTTP/1.1, HTTP/2): the protocol mix"),
    "accelnet_route_requests_total": ("counter", "requests by the status class the client got "
                                      "(aborted: cut before the whole response)"),
    "accelnet_route_request_duration_seconds": ("histogram", "request head read to the "
                                                "exchange's end (a stream's last byte)"),
    "accelnet_route_ttft_seconds": ("histogram", "request sent to the first streamed token event "
                                    "(SSE data with text)"),
    "accelnet_route_token_gap_seconds": ("histogram",
                                         "time between successive streamed token events"),
    "accelnet_route_tokens_total": ("counter", "LLM tokens: prompt and completion from the "
                                    "response's usage, completion counted from streamed events "
                                    "without one"),
    "accelnet_route_cache_total": ("counter", "requests by what the response cache did "
                                   "(Cache-Status): hit, stale, stale_if_error, collapsed (served "
                                   "from another request's fill), miss, revalidated, bypass, "
                                   "method (unsafe: invalidates), request (its Cache-Control asked "
                                   "for the origin), pass (not storable lately)"),
    "accelnet_tenant_requests_total": ("counter", "requests of an authenticated tenant by the "
                                       "status class it got (past metrics.max_tenants: tenant "
                                       "other)"),
    "accelnet_tenant_tokens_total": ("counter", "LLM tokens of an authenticated tenant, as "
                                     "accelnet_route_tokens_total"),
    "accelnet_route_spend_micros_total": ("counter", "what the route's requests cost at the "
                                          "configured prices (routes with a budget), in "
                                          "millionths of the prices' currency"),
    "accelnet_route_budget_full_total": ("counter", "requests refused 503 because the route's "
                                         "budget table had no slot left for their tenant in "
                                         "this window"),
    "accelnet_route_budget_cut_total": ("counter", "responses ended early because they outgrew "
                                        "their reservation and their tenant's budget could not "
                                        "cover more"),
    "accelnet_tenant_spend_micros_total": ("counter", "what an authenticated tenant's requests "
                                           "on routes with a budget cost at the configured "
                                           "prices, in millionths of the prices' currency"),
    "accelnet_model_spend_micros_total": ("counter", "what requests for a priced model on "
                                          "routes with a budget cost, in millionths of the "
                                          "prices' currency"),
    "accelnet_model_tokenizer_up": ("gauge", "1 while the model's tokenizer works (degraded "
                                    "included), 0 while it is failing: most of the prompts it "
                                    "was asked to encode in the last 10 s failed (GET /readyz "
                                    "answers 503)"),
    "accelnet_model_tokenizer_degraded": ("gauge", "1 when the model has no chat format (its "
                                          "chat template is one accelnet does not know, or it "
                                          "has none): its chat requests are keyed on text, not "
                                          "tokens"),
    "accelnet_model_prompts_total": ("counter", "prompts of a model with a tokenizer by how "
                                     "balance: llm keyed them: tokens, else on the text's bytes "
                                     "because the model has no chat format (template_unknown), "
                                     "the chat format does not take the messages "
                                     "(content_unsupported), the prompt is not one text or one "
                                     "list of ids (prompt_unsupported), or the tokenizer failed "
                                     "on it (encode_failed)"),
}

POOL_KEYS = ["name", "balance", "unavailable", "retries_denied", "spilled_in", "session_hits",
             "session_moves", "pd", "discovery", "queue", "backends"]
QUEUE_KEYS = ["discipline", "length", "enqueued", "granted", "timeouts", "overflows", "displaced",
              "spilled", "withdrawn", "wait_ms"]
BACKEND_KEYS = ["address", "source", "state", "weight", "present", "up", "eligible", "ejected", "inflight", "max_concurrency",
                "latency_ms", "requests", "connect_failures", "retries", "ejections",
                "reported_load", "hedged", "hedge_wins", "ttfb_ms", "gap_ms", "ttft_ms",
                "token_gap_ms", "llm_base_ms", "llm_block_ms", "llm_work_ms",
                "llm_index_blocks", "llm_prompt_blocks", "llm_missed_blocks", "responses",
                "tls_handshakes", "tls_resumed", "tls_failures", "l4_connections", "l4_bytes",
                "engine", "kv_events"]
CLASSES = ["aborted", "1xx", "2xx", "3xx", "4xx", "5xx"]


def _key(**labels):
    """A series' labels as prom_samples() keys them."""
    return tuple(sorted(labels.items()))


def _answered(admin, n):
    """/status once the pool gpu has counted <n> answers (a response is counted as its
    exchange ends, a moment after the client has it)."""
    def done():
        bes = status(admin)["pools"][0]["backends"]
        return sum(be["responses"]["2xx"] for be in bes) == n
    wait_until(done, f"{n} answers counted")
    return status(admin)


def _two_pools(env, workers=2):
    a = env.sim("a", latency_ms=1, jitter=0, token_ms=0)
    b = env.sim("b", latency_ms=1, jitter=0, token_ms=0)
    px = env.proxy("pools:\n" + pool_yaml("gpu", [a.port, b.port]) + pool_yaml("web", [b.port])
                   + "routes:\n  - match: {path_prefix: /}\n    pool: gpu\n", workers=workers)
    return a, b, px


def test_every_family_with_its_help_type_and_labels(env):
    a, b, px = _two_pools(env)
    assert complete(px.port)[0] == 200
    st, hdrs, text = request(px.admin, "GET", "/metrics")
    text = text.decode()
    assert st == 200 and hdrs["content-type"] == ["text/plain; version=0.0.4"], hdrs
    helps = {}
    for line in text.splitlines():
        if line.startswith("# HELP "):
            name, help_ = line[7:].split(" ", 1)
            helps[name] = [None, help_]
        elif line.startswith("# TYPE "):
            name, type_ = line[7:].split(" ", 1)
            helps[name][0] = type_
    assert {k: tuple(v) for k, v in helps.items()} == FAMILIES
    got = prom_samples(text)
    backends = [("gpu", f"127.0.0.1:{a.port}"), ("gpu", f"127.0.0.1:{b.port}"),
                ("web", f"127.0.0.1:{b.port}")]
    for pool, be in backends:
        labels = {"pool": pool, "backend": be}
        for name in ("accelnet_backend_up", "accelnet_backend_requests_total",
                     "accelnet_backend_ttfb_seconds_count", "accelnet_backend_gap_seconds_sum"):
            assert (name, _key(**labels)) in got, (name, labels)
        for cls in CLASSES:
            assert ("accelnet_backend_responses_total",
                    _key(**labels, **{"class": cls})) in got, cls
    route = {"route": "0"}  # a route without a name: its index
    for cls in CLASSES:
        assert ("accelnet_route_requests_total", _key(**route, **{"class": cls})) in got, cls
    for kind in ("prompt", "completion"):
        assert ("accelnet_route_tokens_total", _key(**route, kind=kind)) in got, kind
    for name in ("duration", "ttft", "token_gap"):
        assert ("accelnet_route_" + name.replace("duration", "request_duration") +
                "_seconds_count", _key(**route)) in got, name
    assert not [k for k in got if k[0].startswith("accelnet_tenant_")]  # none authenticated
    for pool in ("gpu", "web"):
        assert ("accelnet_pool_queue_length", _key(pool=pool)) in got
        assert ("accelnet_pool_queue_wait_seconds_bucket", _key(pool=pool, le="+Inf")) in got
    promtool_clean(text)


def test_status_has_the_same_fields_and_counts(env):
    a, b, px = _two_pools(env)
    for _ in range(5):
        assert complete(px.port)[0] == 200
    st = _answered(px.admin, 5)
    assert [p["name"] for p in st["pools"]] == ["gpu", "web"]
    for p in st["pools"]:
        assert list(p) == POOL_KEYS, list(p)
        assert list(p["queue"]) == QUEUE_KEYS, list(p["queue"])
        for be in p["backends"]:
            assert list(be) == BACKEND_KEYS, list(be)
            assert list(be["responses"]) == CLASSES
            assert be["up"] is True and be["ejected"] is False
    got = prom_samples(metrics_text(px.admin))
    for be in st["pools"][0]["backends"]:
        labels = {"pool": "gpu", "backend": be["address"]}
        assert got[("accelnet_backend_requests_total", _key(**labels))] == be["requests"]
        assert got[("accelnet_backend_ttfb_seconds_count", _key(**labels))] == \
            be["ttfb_ms"]["count"]
        assert (got[("accelnet_backend_responses_total", _key(**labels, **{"class": "2xx"}))]
                == be["responses"]["2xx"])
    assert sum(be["requests"] for be in st["pools"][0]["backends"]) == 5


def test_counts_from_several_workers_add_up(env):
    _, _, px = _two_pools(env, workers=4)
    n = 40
    for _ in range(n):
        assert complete(px.port)[0] == 200
    st = _answered(px.admin, n)
    bes = st["pools"][0]["backends"]
    assert sum(be["requests"] for be in bes) == n, bes
    assert sum(be["responses"]["2xx"] for be in bes) == n, bes
    assert sum(be["ttfb_ms"]["count"] for be in bes) == n, bes
    json.dumps(st)  # plain JSON all the way down


MODEL_KEYS = ["name", "tokenizer", "tokenizer_up", "tokenizer_degraded", "window", "prompts"]
KEYED = ["tokens", "template_unknown", "content_unsupported", "prompt_unsupported",
         "encode_failed"]


def test_model_series_of_a_tokenizer(env):
    """A model with a tokenizer (models:) has its series under the label model: its prompts
    by how they were keyed (every label value, 0 included), whether its tokenizer is up and
    degraded; /status lists it under "models" with the same counts."""
    from test_tokenize import _tiny
    tok = env.write("tokenizer.json", json.dumps(_tiny()))
    a = env.sim("a", latency_ms=1, jitter=0, token_ms=0)
    px = env.proxy(f"models:\n  tiny: {{tokenizer: {tok}, block_size: 2}}\npools:\n"
                   + pool_yaml("gpu", [a.port], balance="llm"))
    for prompt in ("abc ab", "ab ab abc", ["x", "y"]):
        assert complete(px.port, json.dumps({"model": "tiny", "prompt": prompt}))[0] == 200
    text = metrics_text(px.admin)
    got = prom_samples(text)
    want = {"tokens": 2, "prompt_unsupported": 1}
    for keyed in KEYED:
        assert got[("accelnet_model_prompts_total", _key(model="tiny", keyed=keyed))] == \
            want.get(keyed, 0), keyed
    assert got[("accelnet_model_tokenizer_up", _key(model="tiny"))] == 1
    # no tokenizer_config.json: no chat format, its chats keyed on text
    assert got[("accelnet_model_tokenizer_degraded", _key(model="tiny"))] == 1
    [m] = status(px.admin)["models"]
    assert list(m) == MODEL_KEYS, list(m)
    assert (m["name"], m["tokenizer"], m["tokenizer_up"], m["tokenizer_degraded"]) == \
        ("tiny", "degraded", True, True), m
    assert m["prompts"] == {k: want.get(k, 0) for k in KEYED}, m
    assert list(m["window"]) == ["tried", "failed"], m
    promtool_clean(text)
