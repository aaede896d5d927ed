-- Argo CD health check for Workload, WorkloadDeployment and Instance (compute.nebula.dev).
-- It follows the kstatus conventions the operator writes: Stalled=True is Degraded (a reason only
-- a person can remove stops progress), Reconciling=True is Progressing, a status computed from an
-- older generation is Progressing, and otherwise the object is Healthy.
local hs = {}

local function condition(kind)
  if obj.status == nil or obj.status.conditions == nil then
    return nil
  end
  for _, c in ipairs(obj.status.conditions) do
    if c.type == kind then
      return c
    end
  end
  return nil
end

local function describe(c)
  local reason = c.reason or ""
  if c.message ~= nil and c.message ~= "" then
    return reason .. ": " .. c.message
  end
  return reason
end

if obj.metadata ~= nil and obj.metadata.deletionTimestamp ~= nil then
  hs.status = "Progressing"
  hs.message = "Being deleted"
  return hs
end

local generation = obj.metadata and obj.metadata.generation
local observed = obj.status and obj.status.observedGeneration
if obj.kind ~= "Instance" and generation ~= nil and (observed == nil or observed < generation) then
  hs.status = "Progressing"
  hs.message = "Waiting for the operator to observe generation " .. tostring(generation)
  return hs
end

local stalled = condition("Stalled")
if stalled ~= nil and stalled.status == "True" then
  hs.status = "Degraded"
  hs.message = describe(stalled)
  return hs
end

local reconciling = condition("Reconciling")
if reconciling ~= nil and reconciling.status == "True" then
  hs.status = "Progressing"
  hs.message = describe(reconciling)
  return hs
end

if stalled == nil and reconciling == nil then
  hs.status = "Progressing"
  hs.message = "Waiting for the operator to report status"
  return hs
end

local summary = condition("Available") or condition("Ready")
if summary ~= nil and summary.status == "False" then
  hs.status = "Degraded"
  hs.message = describe(summary)
  return hs
end

hs.status = "Healthy"
hs.message = summary ~= nil and (summary.message or "") or ""
return hs
