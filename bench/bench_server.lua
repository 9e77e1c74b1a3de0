-- bench_server.lua: a wrk script for bench/bench_server.py. Each connection is one client
-- that sends one query per request (POST /indexes/NAME/search, the URL's path), cycling
-- through the request bodies of the file given after `--` (one JSON body per line, made
-- by bench_server.py), and waits for the answer before sending the next (wrk keeps one
-- request in flight per connection). At the end it prints one line bench_server.py
-- parses: requests, seconds, p50 and p99 latency, non-2xx answers and socket errors.
local bodies = {}
local next_body = 0
local headers = {["Content-Type"] = "application/json"}

function init(args)
  for line in io.lines(args[1]) do
    bodies[#bodies + 1] = line
  end
  -- threads start at different queries
  next_body = math.random(#bodies) - 1
end

function request()
  next_body = next_body % #bodies + 1
  return wrk.format("POST", nil, headers, bodies[next_body])
end

function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format("RESULT requests=%d duration_us=%d p50_us=%d p99_us=%d non2xx=%d socket_errors=%d\n",
    summary.requests, summary.duration, latency:percentile(50), latency:percentile(99), e.status,
    e.connect + e.read + e.write + e.timeout))
end
