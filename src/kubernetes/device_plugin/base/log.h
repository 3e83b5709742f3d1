#pragma once

// The device plugin's log: one line per event on stderr (the kubelet's
// DaemonSet collects it), "2026-12-02T08:00:00.123Z gpuslice-device-plugin
// LEVEL message". Thread-safe: each line is one write.

#include <string_view>

namespace gpuslice::kubernetes {

void LogInfo(std::string_view message);
void LogWarn(std::string_view message);
void LogError(std::string_view message);

}  // namespace gpuslice::kubernetes
