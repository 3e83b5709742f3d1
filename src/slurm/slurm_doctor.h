#pragma once

// `gpuslice doctor` on a Slurm node: reads slurm.conf ($SLURM_CONF, else
// /etc/slurm/slurm.conf), gres.conf and plugstack.conf (with the files it
// includes), stats gres.conf's device nodes of this host and tries the
// daemon's socket as an ordinary user of its group would; the verdicts are
// CheckSlurm's (slurm_conf.h). The CLI runs it beside the daemon's own
// checks, so the daemon links no integration. A machine without a
// slurm.conf is not a Slurm node: no checks.

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>

namespace gpuslice::slurm {

// [{"name", "ok", "detail"[, "note": true]}...], the shape of the daemon's
// doctor checks. `daemon_socket` is the socket the CLI reached the daemon
// at; `gpu_minors` the daemon's GPUs by device minor (GET /v1/gpus).
nlohmann::json SlurmDoctorChecks(const std::string& daemon_socket,
                                 const std::map<uint32_t, std::string>& gpu_minors);

}  // namespace gpuslice::slurm
