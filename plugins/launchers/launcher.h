#pragma once
// Launcher: how a run's worker processes start (Lightning's
// strategies/launchers/launcher.py), apart from where a process comes from
// (ClusterEnvironment, plugins/environments/) and from what the processes do
// together (the strategy). A strategy configures one only where nothing
// outside started the ranks (ClusterEnvironment::creates_processes_externally()
// false): torchrun, srun and mpirun are launchers outside this program.

namespace lt {

class Launcher {
 public:
  virtual ~Launcher() = default;
  // Starts this node's workers and supervises them, then ends this process
  // with the run's exit code: the run happens in the workers.
  [[noreturn]] virtual void launch() = 0;
};

}  // namespace lt
