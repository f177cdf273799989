-- Sets a Fluent Bit record's timestamp from OCSF's time, milliseconds
-- since the epoch (fluent-bit-ocsf.conf). A record without a numeric time
-- is passed on unchanged.
function ocsf_time(tag, timestamp, record)
  local ms = record["time"]
  if type(ms) ~= "number" then
    return 0, timestamp, record
  end
  return 1, ms / 1000, record
end
