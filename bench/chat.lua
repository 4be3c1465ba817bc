-- wrk script: POST a one-message request in one of llmgw's dialects, then print one
-- machine-readable line.
--
-- Env: BENCH_API ("chat" for /v1/chat/completions, "messages" for Anthropic's /v1/messages,
-- "responses" for OpenAI's /v1/responses; default chat), BENCH_MODEL (model name),
-- BENCH_STREAM ("true" or "false"), BENCH_KEY (bearer key), BENCH_CACHE ("hit": a chat request
-- with temperature 0, which the response cache answers once it has kept it; "miss": the same with
-- `Cache-Control: no-cache`, always answered by the upstream and kept again).
-- Output: RESULT rps=<float> p50_ms=<float> p99_ms=<float> requests=<int> errors=<int> ...
-- errors = non-2xx/3xx responses (wrk counts status > 399) + connect/read/write/timeout errors.

local api = os.getenv("BENCH_API") or "chat"
local model = os.getenv("BENCH_MODEL") or "fake-json"
local stream = os.getenv("BENCH_STREAM") == "true" and "true" or "false"
local key = os.getenv("BENCH_KEY") or ""
local cache = os.getenv("BENCH_CACHE") or ""

wrk.method = "POST"
if api == "messages" then
  -- Anthropic requires max_tokens; the SDK sends anthropic-version with every request.
  wrk.body = string.format(
    '{"model": "%s", "max_tokens": 64, "messages": [{"role": "user", "content": "hello"}], "stream": %s}',
    model, stream)
  wrk.headers["anthropic-version"] = "2023-06-01"
elseif api == "responses" then
  wrk.body = string.format('{"model": "%s", "input": "hello", "stream": %s}', model, stream)
elseif cache ~= "" then
  wrk.body = string.format(
    '{"model": "%s", "messages": [{"role": "user", "content": "hello"}], "stream": %s, "temperature": 0}',
    model, stream)
  if cache == "miss" then
    wrk.headers["Cache-Control"] = "no-cache"
  end
else
  wrk.body = string.format(
    '{"model": "%s", "messages": [{"role": "user", "content": "hello"}], "stream": %s}',
    model, stream)
end
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
