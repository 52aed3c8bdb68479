-- wrk script for bench/proxy.sh's DPoP case: every request carries `Authorization: DPoP <token>`
-- and a new proof, read from a file made beforehand (bench/dpop_proofs.py proofs, one a line,
-- each `jti` distinct). Each wrk thread takes its own slice of the file (line k goes to thread
-- k mod THREADS), so no proof is sent twice until a thread has used its whole slice; then it
-- starts again (a replay: the proxy answers 401) and counts a wrap (printed as "proof wraps: N").
-- PAUSE_MS > 0: each connection waits that long after an answer before its next request (a
-- fixed rate of about connections * 1000 / (PAUSE_MS + latency) requests a second).
-- Usage: wrk -t2 ... -s bench/dpop.lua URL -- TOKEN PROOFS_FILE THREADS [PAUSE_MS]
local threads = {}
local next_id = 0

function setup(thread)
  thread:set("id", next_id)
  next_id = next_id + 1
  table.insert(threads, thread)
end

local proofs, count, i = {}, 0, 0
local headers = {}
wraps = 0

function init(args)
  local token, path, nthreads, pause = args[1], args[2], tonumber(args[3]), tonumber(args[4] or "0")
  headers["Authorization"] = "DPoP " .. token
  local k = 0
  for line in io.lines(path) do
    if line ~= "" then
      if k % nthreads == id then count = count + 1; proofs[count] = line end
      k = k + 1
    end
  end
  assert(count > 0, "no proofs for thread " .. id .. " in " .. path)
  if pause > 0 then
    function delay() return pause end
  end
end

function request()
  i = i + 1
  if i > count then i = 1; wraps = wraps + 1 end
  headers["DPoP"] = proofs[i]
  return wrk.format(nil, nil, headers)
end

function done(summary, latency, requests)
  local total = 0
  for _, thread in ipairs(threads) do total = total + thread:get("wraps") end
  io.write(string.format("proof wraps: %d\n", total))
end
