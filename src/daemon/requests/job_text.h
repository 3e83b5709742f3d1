#pragma once

// Text about a job shown to others: without its owner's environment, and
// its labels in one line.

#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace gpuslice::daemon {

// `text` with the value of every `env` entry ("K=V", values of 6 or more
// characters) replaced by "$K": a message shown to others (a job's failure
// reason, an event) must not carry its owner's environment, e.g. the PATH a
// "command not found" names.
// Values that are, or are part of, `owner` (the job's user name: USER,
// LOGNAME) are left alone: the name is shown beside every job anyway, and
// replacing it would name the user `$LOGNAME` in events and reasons.
std::string RedactEnvironment(std::string text, const std::vector<std::string>& env,
                              std::string_view owner = {});

// A job's labels in one line:
// "container=server, namespace=ml, pod=infer-0" (events, logs).
std::string LabelsText(const std::map<std::string, std::string>& labels);

}  // namespace gpuslice::daemon
