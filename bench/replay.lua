-- wrk script for bench/cache.py: GET every path of a file once, in the file's order, over
-- wrk's connections (run it with -t1), then print one line of counts and exit.
--   wrk -t1 -c8 -d600s -s bench/replay.lua http://HOST:PORT/ -- PATHS_FILE N
-- Once the list is spent, a connection still asking gets /replay-pad (a 404 at the origin,
-- left out of the counts there, and here counted apart); wrk exits as soon as N answers to
-- the list are in: "ok" those with status 200, "bad" any other but 404 (what the origin has
-- for none of the list, and answers the pads with). Without N answers wrk ends at -d
-- printing nothing.
local paths, n, i, ok, bad, pads, pad_answers = {}, 0, 0, 0, 0, 0, 0

function init(args)
	for line in io.lines(args[1]) do
		n = n + 1
		paths[n] = line
	end
	want = tonumber(args[2]) or n
end

-- wrk 4.1 calls request() once before the run, to check that what it returns parses
-- (script_verify_request); that call must not use up a path.
local verified = false

function request()
	if not verified then
		verified = true
		return wrk.format("GET", paths[1])
	end
	i = i + 1
	if i <= n then
		return wrk.format("GET", paths[i])
	end
	pads = pads + 1
	return wrk.format("GET", "/replay-pad")
end

local function report()
	io.write(string.format('REPLAYJSON {"ok":%d,"bad":%d,"sent":%d,"pads":%d,"pad_answers":%d}\n',
		ok, bad, math.min(i, n), pads, pad_answers))
	io.flush()
end

function response(status, headers, body)
	if status == 200 then
		ok = ok + 1
	elseif status == 404 then
		pad_answers = pad_answers + 1
	else
		bad = bad + 1
	end
	if ok + bad >= want then
		report()
		os.exit(0)
	end
end
