-- wrk script for bench/jwt.sh: every request carries `Authorization: Bearer <token>`, the tokens
-- read from a file (one a line) and used in turn. Each wrk thread takes its own slice of the file
-- (line k goes to thread k mod THREADS), so no token is sent twice until a thread has used its
-- whole slice; then it starts again and counts a wrap (printed at the end as "token wraps: N").
-- A file with one token gives the cache-hit cases the same per-request script cost.
-- Usage: wrk -t2 ... -s bench/jwt.lua URL -- TOKENS_FILE THREADS
local threads = {}
local next_id = 0

function setup(thread)
  thread:set("id", next_id)
  next_id = next_id + 1
  table.insert(threads, thread)
end

local tokens, count, i = {}, 0, 0
local headers = {}
wraps = 0

function init(args)
  local path, nthreads = args[1], tonumber(args[2])
  local all, k = {}, 0
  for line in io.lines(path) do
    if line ~= "" then
      if k % nthreads == id then count = count + 1; tokens[count] = line end
      k = k + 1
      if k <= nthreads then all[k] = line end
    end
  end
  if count == 0 then tokens, count = all, #all end -- fewer tokens than threads: share them
  assert(count > 0, "no tokens in " .. path)
end

function request()
  i = i + 1
  if i > count then i = 1; wraps = wraps + 1 end
  headers["Authorization"] = "Bearer " .. tokens[i]
  return wrk.format(nil, nil, headers)
end

function done(summary, latency, requests)
  local total = 0
  for _, thread in ipairs(threads) do total = total + thread:get("wraps") end
  io.write(string.format("token wraps: %d\n", total))
end
