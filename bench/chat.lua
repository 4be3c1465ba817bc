-- wrk script: POST a one-message chat completion, then print one machine-readable line.
--
-- Env: BENCH_MODEL (model name), BENCH_STREAM ("true" or "false"), BENCH_KEY (bearer key).
-- Output: RESULT rps=<float> p50_ms=<float> p99_ms=<float> requests=<int> errors=<int> ...
-- errors = non-2xx/3xx responses (wrk counts status > 399) + connect/read/write/timeout errors.

local model = os.getenv("BENCH_MODEL") or "fake-json"
local stream = os.getenv("BENCH_STREAM") == "true" and "true" or "false"
local key = os.getenv("BENCH_KEY") or ""

wrk.method = "POST"
wrk.body = string.format(
  '{"model": "%s", "messages": [{"role": "user", "content": "hello"}], "stream": %s}',
  model, stream)
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Authorization"] = "Bearer " .. key

function done(summary, latency, requests)
  local e = summary.errors
  local socket_errors = e.connect + e.read + e.write + e.timeout
  local seconds = summary.duration / 1e6
  io.write(string.format(
    "RESULT rps=%.1f p50_ms=%.3f p99_ms=%.3f requests=%d errors=%d status_errors=%d socket_errors=%d\n",
    summary.requests / seconds,
    latency:percentile(50) / 1000,
    latency:percentile(99) / 1000,
    summary.requests,
    e.status + socket_errors,
    e.status,
    socket_errors))
end
