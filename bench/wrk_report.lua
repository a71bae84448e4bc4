-- wrk reporter: one JSON line with what bench/run needs (wrk prints no p99.9 by itself).
done = function(summary, latency, requests)
	local e = summary.errors
	io.write(string.format(
		'WRKJSON {"requests":%d,"duration_us":%d,"errors":%d,"non2xx":%d,' ..
		'"p50_ms":%.3f,"p99_ms":%.3f,"p999_ms":%.3f,"max_ms":%.3f}\n',
		summary.requests, summary.duration, e.connect + e.read + e.write + e.timeout,
		e.status, latency:percentile(50) / 1000, latency:percentile(99) / 1000,
		latency:percentile(99.9) / 1000, latency.max / 1000))
end
