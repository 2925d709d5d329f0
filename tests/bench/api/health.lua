-- GET / (the health check): a round trip the server answers with no work, the floor of
-- what any request costs at one connection. Loaded by run.sh like the shared scripts.
dofile((os.getenv("WRKDIR") or ".").."/ddb-common.lua")
function request()
  return wrk.format("GET", "/")
end
