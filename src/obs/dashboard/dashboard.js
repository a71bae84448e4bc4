/*
 * dashboard.js - the live dashboard: reads /dashboard.json once a second and draws it.
 *
 * The feed is the /status document plus each histogram's bucket counts (obs/json.h). Rates
 * are the change of a counter over the last three readings divided by the time they span;
 * percentiles come from the change of the bucket counts over the last five readings (as Prometheus's
 * histogram_quantile over rate()), interpolated inside a bucket. A counter that went back
 * (a restart) gives a gap, not a negative rate.
 *
 * With admin.token_file the feed needs "Authorization: Bearer TOKEN": the token comes from
 * the address (#token=TOKEN, then removed from it) or from the form shown after a 401, and
 * is kept in this tab's sessionStorage only. Charts are SVG polylines; nothing is loaded
 * from anywhere but this admin listener.
 */
"use strict";

(function () {
	const FEED = "/dashboard.json";
	const PERIOD_MS = 1000;
	const KEEP = 120;	  /* points per chart: two minutes */
	const RATE_WINDOW = 3; /* readings that a rate spans */
	const PCT_WINDOW = 5;  /* readings that a percentile spans */
	const TOKEN_KEY = "accelnet.admin.token";
	const COLORS = ["#4e9af1", "#f1a84e", "#5cc98a", "#e5645e", "#b18cf0", "#e0d060", "#5fd0d0",
			"#d080b0"];
	const SVG = "http://www.w3.org/2000/svg";
	const W = 400, H = 140, PAD_L = 44, PAD_B = 4, PAD_T = 6;

	const readings = []; /* {t, doc}, oldest first, at most PCT_WINDOW + 1 */
	const charts = {};
	let timer = null;

	/* ---- the token ---- */

	function token() {
		return sessionStorage.getItem(TOKEN_KEY) || "";
	}

	/* #token=TOKEN in the address: keep it, take it out of the address; 1 if there was one. */
	function takeTokenFromAddress() {
		const m = /(?:^#|&)token=([^&]*)/.exec(location.hash);
		if (!m)
			return 0;
		let value = m[1];
		try {
			value = decodeURIComponent(value);
		} catch (e) {
			/* a % not followed by two hex digits: the token as written (a wrong one is
			 * answered 401, and the form asks again) */
		}
		sessionStorage.setItem(TOKEN_KEY, value);
		history.replaceState(null, "", location.pathname + location.search);
		document.getElementById("token-form").hidden = true;
		return 1;
	}

	function askToken() {
		const form = document.getElementById("token-form");
		form.hidden = false;
		document.getElementById("token-input").focus();
	}

	function onTokenSubmit(ev) {
		ev.preventDefault();
		const input = document.getElementById("token-input");
		sessionStorage.setItem(TOKEN_KEY, input.value.trim());
		input.value = "";
		document.getElementById("token-form").hidden = true;
		readings.length = 0;
		schedule(0);
	}

	/* ---- reading the feed ---- */

	function setState(text, cls) {
		const el = document.getElementById("feed-state");
		el.textContent = text;
		el.className = "state " + cls;
	}

	function schedule(ms) {
		clearTimeout(timer);
		timer = setTimeout(poll, ms);
	}

	async function poll() {
		const headers = {};
		if (token() && !/^[\x21-\x7e]+$/.test(token())) {
			/* admin.token_file holds printable ASCII without spaces; anything else cannot be
			 * sent in a header at all (fetch would fail as if the listener were down) */
			setState("not a token: printable ASCII, no spaces", "bad");
			askToken();
			return;
		}
		if (token())
			headers.Authorization = "Bearer " + token();
		let res;
		try {
			res = await fetch(FEED, {headers, cache: "no-store"});
		} catch (e) {
			setState("admin listener unreachable", "bad");
			schedule(PERIOD_MS);
			return;
		}
		if (res.status === 401) {
			setState("token needed", "bad");
			askToken();
			return; /* until a token is entered */
		}
		if (!res.ok) {
			setState("feed answered " + res.status, "bad");
			schedule(PERIOD_MS);
			return;
		}
		let doc;
		try {
			doc = await res.json();
		} catch (e) {
			setState("feed is not JSON", "bad");
			schedule(PERIOD_MS);
			return;
		}
		readings.push({t: performance.now(), doc});
		if (readings.length > PCT_WINDOW + 1)
			readings.shift();
		setState("live", "good");
		document.getElementById("updated").textContent =
		    "updated " + new Date().toLocaleTimeString();
		draw();
		schedule(PERIOD_MS);
	}

	/* ---- figures from the documents ---- */

	function num(v) {
		return typeof v === "number" && isFinite(v) ? v : 0;
	}

	function backends(doc) {
		const out = [];
		for (const p of doc.pools || [])
			for (const b of p.backends || [])
				out.push({pool: p.name, b});
		return out;
	}

	/* Backend <address> of pool <pool> in <doc>, or null. */
	function findBackend(doc, pool, address) {
		const m = backends(doc).find((x) => x.pool === pool && x.b.address === address);
		return m ? m.b : null;
	}

	/* A backend's name on the charts: its address, with its pool's name where the same
	 * address is in more than one pool (their series would be one otherwise). */
	function backendLabel(bes, pool, address) {
		const shared = bes.some((x) => x.pool !== pool && x.b.address === address);
		return shared ? `${pool} ${address}` : address;
	}

	function beErrors(b) {
		const r = b.responses || {};
		return num(r["5xx"]) + num(r.aborted) + num(b.connect_failures);
	}

	function poolTurnedAway(p) {
		const q = p.queue || {};
		return num(p.unavailable) + num(q.timeouts) + num(q.overflows);
	}

	function sum(list, fn) {
		let s = 0;
		for (const x of list)
			s += fn(x);
		return s;
	}

	/* Per-second change of <fn>(doc) over the last RATE_WINDOW readings; null when unknown. */
	function rate(fn) {
		if (readings.length < 2)
			return null;
		const a = readings[Math.max(0, readings.length - 1 - RATE_WINDOW)];
		const b = readings[readings.length - 1];
		const d = fn(b.doc) - fn(a.doc), dt = (b.t - a.t) / 1000;
		return d < 0 || dt <= 0 ? null : d / dt;
	}

	/* The buckets of the histograms <fn>(doc) returns, summed (non-cumulative counts). */
	function bucketsOf(doc, fn) {
		const acc = [];
		for (const h of fn(doc)) {
			if (!h || !Array.isArray(h.buckets))
				continue;
			h.buckets.forEach((c, i) => (acc[i] = (acc[i] || 0) + num(c)));
		}
		return acc;
	}

	/* Quantile <q> in ms of the samples added over the last PCT_WINDOW readings. */
	function quantile(fn, q) {
		if (readings.length < 2)
			return null;
		const first = readings[0].doc, last = readings[readings.length - 1].doc;
		const bounds = last.bounds_ms || [];
		const a = bucketsOf(first, fn), b = bucketsOf(last, fn);
		const d = b.map((c, i) => c - (a[i] || 0));
		if (d.some((c) => c < 0))
			return null;
		const total = d.reduce((s, c) => s + c, 0);
		if (total === 0)
			return null;
		const want = q * total;
		let seen = 0;
		for (let i = 0; i < d.length; i++) {
			if (seen + d[i] >= want && d[i] > 0) {
				if (i >= bounds.length)
					return bounds[bounds.length - 1] || 0;
				const lo = i ? bounds[i - 1] : 0, hi = bounds[i];
				return lo + (hi - lo) * ((want - seen) / d[i]);
			}
			seen += d[i];
		}
		return bounds[bounds.length - 1] || 0;
	}

	function ttfbHists(doc) {
		return backends(doc).map((x) => x.b.ttfb_ms);
	}

	function queueWaitHists(doc) {
		return (doc.pools || []).map((p) => (p.queue || {}).wait_ms);
	}

	function routeHists(key) {
		return (doc) => (doc.routes || []).map((r) => r[key]);
	}

	function routeRequests(r) {
		return sum(Object.values(r.requests || {}), num);
	}

	function routeFailed(r) {
		const q = r.requests || {};
		return num(q["5xx"]) + num(q.aborted);
	}

	function routeTokens(kind) {
		return (doc) => sum(doc.routes || [], (r) => num((r.tokens || {})[kind]));
	}

	/* ---- charts ---- */

	function el(name, attrs, parent) {
		const e = document.createElementNS(SVG, name);
		for (const k in attrs)
			e.setAttribute(k, attrs[k]);
		if (parent)
			parent.appendChild(e);
		return e;
	}

	function chart(id) {
		if (charts[id])
			return charts[id];
		const fig = document.getElementById(id);
		const svg = el("svg", {viewBox: `0 0 ${W} ${H}`}, fig);
		const grid = el("g", {class: "grid"}, svg);
		const lines = el("g", {class: "lines"}, svg);
		const legend = document.createElement("div");
		legend.className = "legend";
		fig.appendChild(legend);
		charts[id] = {svg, grid, lines, legend, series: new Map()};
		return charts[id];
	}

	/* Add one point per series (<values>: [{name, value}], value null for a gap) to chart <id>. */
	function push(id, values) {
		const c = chart(id);
		for (const {name} of values)
			if (!c.series.has(name))
				c.series.set(name, {data: [], color: COLORS[c.series.size % COLORS.length]});
		for (const [name, s] of c.series) {
			const v = values.find((x) => x.name === name);
			s.data.push(v ? v.value : null);
			if (s.data.length > KEEP)
				s.data.shift();
			s.last = v ? v.value : null;
		}
		render(c);
	}

	function niceMax(v) {
		if (v <= 0)
			return 1;
		const p = Math.pow(10, Math.floor(Math.log10(v)));
		for (const m of [1, 2, 2.5, 5, 10])
			if (m * p >= v)
				return m * p;
		return 10 * p;
	}

	function fmt(v) {
		if (v === null || v === undefined)
			return "-";
		if (v >= 100)
			return Math.round(v).toString();
		if (v >= 10)
			return v.toFixed(1);
		return v.toFixed(2);
	}

	function render(c) {
		const w = Math.max(120, Math.round(c.svg.clientWidth || W)); /* drawn at pixel size */
		c.svg.setAttribute("viewBox", `0 0 ${w} ${H}`);
		let max = 0;
		for (const s of c.series.values())
			for (const v of s.data)
				if (v !== null && v > max)
					max = v;
		max = niceMax(max * 1.05);
		c.grid.textContent = "";
		for (const f of [0, 0.5, 1]) {
			const y = PAD_T + (H - PAD_T - PAD_B) * (1 - f);
			el("line", {x1: PAD_L, x2: w, y1: y, y2: y}, c.grid);
			const t = el("text", {x: PAD_L - 4, y: y + 4, "text-anchor": "end"}, c.grid);
			t.textContent = fmt(max * f);
		}
		c.lines.textContent = "";
		const step = (w - PAD_L) / (KEEP - 1);
		for (const s of c.series.values()) {
			/* one polyline per run of known values */
			let pts = [];
			const flush = () => {
				if (pts.length)
					el("polyline", {points: pts.join(" "), stroke: s.color}, c.lines);
				pts = [];
			};
			const off = KEEP - s.data.length;
			s.data.forEach((v, i) => {
				if (v === null)
					return flush();
				const x = PAD_L + (off + i) * step;
				const y = PAD_T + (H - PAD_T - PAD_B) * (1 - v / max);
				pts.push(x.toFixed(1) + "," + y.toFixed(1));
			});
			flush();
		}
		c.legend.textContent = "";
		for (const [name, s] of c.series) {
			const item = document.createElement("span");
			const swatch = document.createElement("i");
			swatch.style.background = s.color;
			item.appendChild(swatch);
			item.appendChild(document.createTextNode(`${name} ${fmt(s.last)}`));
			c.legend.appendChild(item);
		}
	}

	function note(id, text) {
		const fig = document.getElementById(id);
		let n = fig.querySelector(".note");
		if (!n) {
			n = document.createElement("div");
			n.className = "note muted";
			fig.appendChild(n);
		}
		n.textContent = text;
		n.hidden = !text;
	}

	/* Add p50 and p99 (named <prefix>p50, ...) of the histograms <fn> returns to chart <id>. */
	function percentiles(id, fn, prefix) {
		push(id, [
			{name: prefix + "p50", value: quantile(fn, 0.5)},
			{name: prefix + "p99", value: quantile(fn, 0.99)},
		]);
	}

	/* ---- one frame ---- */

	function tiles(doc, reqRate, errRate) {
		const bes = backends(doc);
		const up = bes.filter((x) => x.b.up && !x.b.ejected).length;
		const items = [
			["requests/s", fmt(reqRate)],
			["errors/s", fmt(errRate)],
			["backends up", `${up} / ${bes.length}`],
			["in flight", sum(bes, (x) => num(x.b.inflight)).toString()],
			["queued", sum(doc.pools || [], (p) => num((p.queue || {}).length)).toString()],
		];
		const box = document.getElementById("tiles");
		box.textContent = "";
		for (const [label, value] of items) {
			const t = document.createElement("div");
			t.className = "tile";
			const v = document.createElement("b");
			v.textContent = value;
			const l = document.createElement("span");
			l.textContent = label;
			t.appendChild(v);
			t.appendChild(l);
			box.appendChild(t);
		}
	}

	function state(b) {
		if (!b.up)
			return ["down", "bad"];
		if (b.ejected)
			return ["ejected", "bad"];
		if (!b.eligible)
			return ["full", "warn"]; /* up, every slot taken */
		return ["up", "good"];
	}

	function table(doc) {
		const body = document.querySelector("#backends tbody");
		body.textContent = "";
		for (const {pool, b} of backends(doc)) {
			const key = (d) => findBackend(d, pool, b.address);
			const one = (d) => {
				const x = key(d);
				return x ? [x.ttfb_ms] : [];
			};
			const [st, cls] = state(b);
			const slots = num(b.max_concurrency) ? b.max_concurrency : "-";
			const cells = [
				pool, b.address, st, `${num(b.inflight)} / ${slots}`, num(b.reported_load),
				fmt(num(b.latency_ms)), fmt(rate((d) => num((key(d) || {}).requests))),
				fmt(rate((d) => (key(d) ? beErrors(key(d)) : 0))), fmt(quantile(one, 0.5)),
				fmt(quantile(one, 0.99)), num(b.requests),
			];
			const tr = document.createElement("tr");
			cells.forEach((v, i) => {
				const td = document.createElement("td");
				td.textContent = String(v);
				if (i === 2)
					td.className = "st " + cls;
				else if (i >= 3)
					td.className = "num";
				tr.appendChild(td);
			});
			body.appendChild(tr);
		}
	}

	function draw() {
		const doc = readings[readings.length - 1].doc;
		const bes = backends(doc);
		/* the routes' figures (what clients got) when the feed has them */
		const routes = Array.isArray(doc.routes) ? doc.routes : [];
		const hasRoutes = routes.length > 0;
		const hasTtft = sum(routes, (r) => num((r.ttft_ms || {}).count)) > 0;
		const hasTokens = routes.some((r) => r.tokens && typeof r.tokens === "object");

		const reqRate = hasRoutes ? rate((d) => sum(d.routes || [], routeRequests))
					  : rate((d) => sum(backends(d), (x) => num(x.b.requests)));
		const perBackend = bes.map(({pool, b}) => ({
			name: backendLabel(bes, pool, b.address),
			value: rate((d) => num((findBackend(d, pool, b.address) || {}).requests)),
		}));
		push("chart-requests", [{name: "all", value: reqRate}].concat(perBackend));

		const errRate = rate((d) => sum(backends(d), (x) => beErrors(x.b)));
		const awayRate = rate((d) => sum(d.pools || [], poolTurnedAway));
		const failRate = rate((d) => sum(d.routes || [], routeFailed));
		const errs = [
			{name: "backend errors", value: errRate},
			{name: "turned away", value: awayRate},
		];
		if (hasRoutes)
			errs.unshift({name: "clients' 5xx + aborted", value: failRate});
		push("chart-errors", errs);
		const sumRate = errRate === null || awayRate === null ? null : errRate + awayRate;
		tiles(doc, reqRate, hasRoutes ? failRate : sumRate);

		if (hasRoutes)
			percentiles("chart-latency", routeHists("duration_ms"), "");
		else
			percentiles("chart-latency", ttfbHists, "TTFB ");
		if (hasTtft)
			percentiles("chart-ttft", routeHists("ttft_ms"), "");
		else
			percentiles("chart-ttft", ttfbHists, "backend TTFB ");
		note("chart-ttft", hasTtft ? "" : "no streamed tokens counted yet: backend TTFB");
		if (hasTokens) {
			push("chart-tokens", [
				{name: "completion", value: rate(routeTokens("completion"))},
				{name: "prompt", value: rate(routeTokens("prompt"))},
			]);
		} else {
			push("chart-tokens", []);
		}
		note("chart-tokens", hasTokens ? "" : "no per-route token figures in the feed");

		push("chart-queue", (doc.pools || []).map((p) => ({
			name: p.name,
			value: num((p.queue || {}).length),
		})));
		percentiles("chart-wait", queueWaitHists, "");
		push("chart-inflight", bes.map(({pool, b}) => ({
			name: backendLabel(bes, pool, b.address),
			value: num(b.inflight),
		})));
		table(doc);
	}

	document.addEventListener("DOMContentLoaded", () => {
		document.getElementById("token-form").addEventListener("submit", onTokenSubmit);
		window.addEventListener("hashchange", () => {
			if (takeTokenFromAddress()) {
				readings.length = 0;
				schedule(0);
			}
		});
		takeTokenFromAddress();
		poll();
	});
})();
