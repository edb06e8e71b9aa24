-- Argo CD health check for mlmodelscope.io ModelEvaluation, EvaluationSweep and Model.
-- Reads .status.phase, .status.conditions (metav1.Condition), .status.observedGeneration and
-- .status.message, which both evaluation kinds have, plus a ModelEvaluation's .status.summary
-- and an EvaluationSweep's .status.progress and .status.failed. Written for Lua 5.1
-- (gopher-lua).
--   Succeeded                  -> Healthy
--   Pending / Queued / Running -> Progressing (also: no status yet, or status of an older generation)
--   Failed                     -> Degraded
--   Stopped (sweep)            -> Degraded (a child failed under failurePolicy Stop)
--   Suspended (sweep)          -> Suspended (spec.suspend: true)
--   Model                      -> Healthy (a manifest: nothing reconciles it, it has no status;
--                                 evaluations that name a missing or cyclic Model fail instead)
local hs = {}

local function condition(status, kind, value)
  if status.conditions == nil then
    return nil
  end
  for _, c in ipairs(status.conditions) do
    if c.type == kind and c.status == value then
      return c
    end
  end
  return nil
end

local function detail(status, kind, value)
  local c = condition(status, kind, value or "True")
  if c ~= nil and c.message ~= nil and c.message ~= "" then
    if c.reason ~= nil and c.reason ~= "" then
      return c.reason .. ": " .. c.message
    end
    return c.message
  end
  if status.message ~= nil and status.message ~= "" then
    return status.message
  end
  return nil
end

if obj.kind == "Model" then
  local spec = obj.spec or {}
  hs.status = "Healthy"
  if spec.basedOn ~= nil and spec.basedOn.name ~= nil then
    hs.message = "Model manifest based on " .. spec.basedOn.name
  elseif spec.model ~= nil and spec.model.format ~= nil then
    hs.message = "Model manifest: " .. tostring(spec.model.name) .. " (" .. spec.model.format .. ")"
  else
    hs.message = "Model manifest"
  end
  return hs
end

local status = obj.status
if status == nil or status.phase == nil then
  hs.status = "Progressing"
  hs.message = "Waiting for the mlmodelscope operator to pick this up"
  return hs
end

local generation = obj.metadata and obj.metadata.generation
if generation ~= nil and status.observedGeneration ~= nil and status.observedGeneration < generation then
  hs.status = "Progressing"
  hs.message = "Waiting for the operator to observe generation " .. tostring(generation)
  return hs
end

local phase = status.phase

if obj.kind == "EvaluationSweep" then
  -- The sweep's own words first (its progress, e.g. "7/12 Succeeded"), then why.
  local progress = status.progress
  if progress == nil or progress == "" then
    progress = phase
  end
  local function with_detail(text, why)
    if why ~= nil then
      return text .. "; " .. why
    end
    return text
  end
  local failed = ""
  if status.failed ~= nil and status.failed > 0 then
    failed = ", " .. tostring(status.failed) .. " failed"
  end
  if phase == "Succeeded" then
    hs.status = "Healthy"
    hs.message = progress
  elseif phase == "Failed" or phase == "Stopped" then
    hs.status = "Degraded"
    local head = phase
    if progress ~= phase then
      head = phase .. ": " .. progress
    end
    hs.message = with_detail(head .. failed, detail(status, phase))
  elseif phase == "Suspended" then
    hs.status = "Suspended"
    hs.message = with_detail("Suspended at " .. progress, detail(status, "Suspended"))
  elseif phase == "Pending" or phase == "Running" then
    hs.status = "Progressing"
    hs.message = progress .. failed
  else
    hs.status = "Unknown"
    hs.message = "Unknown phase " .. tostring(phase)
  end
  return hs
end

if phase == "Succeeded" then
  hs.status = "Healthy"
  local parts = {}
  local s = status.summary
  if s ~= nil then
    if s.p50Ms ~= nil then table.insert(parts, string.format("p50 %.3g ms", s.p50Ms)) end
    if s.throughput ~= nil then table.insert(parts, string.format("%.4g samples/s", s.throughput)) end
    if s.top1 ~= nil then table.insert(parts, string.format("top-1 %.4g", s.top1)) end
  end
  if #parts > 0 then
    hs.message = "Succeeded: " .. table.concat(parts, ", ")
  else
    hs.message = detail(status, "Succeeded") or "Succeeded"
  end
elseif phase == "Failed" then
  hs.status = "Degraded"
  hs.message = detail(status, "Failed") or "Failed"
elseif phase == "Pending" or phase == "Queued" or phase == "Running" then
  hs.status = "Progressing"
  -- A pod the scheduler cannot place (Scheduled=False, reason Unschedulable) says why.
  hs.message = detail(status, "Scheduled", "False") or detail(status, phase) or phase
else
  hs.status = "Unknown"
  hs.message = "Unknown phase " .. tostring(phase)
end
return hs
