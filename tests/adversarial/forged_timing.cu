// ADVERSARIAL CASE forged_timing (task gemm_bf16) -- expected: REJECTED
//
// In-process timing forgery. The source evaluated is the task's packaged reference kernel followed by this
// file (manifest: base = "reference"), so the kernel is correct and executes the required wgmma, TMA and
// mbarrier work: nothing but its times is false. A constructor runs when the worker loads the library and,
// through the Python C API of the process it finds itself in, replaces torch.cuda.Event.elapsed_time so that
// every interval reads 1.25x shorter: a speedup that never happened, still above the physical floor, with
// the same kernels launched in every call. The profiled program imports no torch, so there the constructor
// changes nothing.
// How the evaluator must catch it: the event times are produced in the candidate's own process, so only a
// measurement taken from outside can tell. The evaluator compares the timed median with the kernel
// durations Nsight Compute measured for the same call, profiled alone on the GPU (timing_disagrees).
#include <dlfcn.h>

namespace {

const char kForgery[] =
    "import sys\n"
    "torch = sys.modules.get('torch')\n"
    "if torch is not None:\n"
    "    _measured = torch.cuda.Event.elapsed_time\n"
    "    torch.cuda.Event.elapsed_time = lambda self, end: _measured(self, end) / 1.25\n";

__attribute__((constructor)) void forge_event_times() {
    using Flag = int (*)();
    using Release = void (*)(int);
    using Run = int (*)(const char*);
    auto initialized = reinterpret_cast<Flag>(dlsym(RTLD_DEFAULT, "Py_IsInitialized"));
    auto ensure = reinterpret_cast<Flag>(dlsym(RTLD_DEFAULT, "PyGILState_Ensure"));
    auto release = reinterpret_cast<Release>(dlsym(RTLD_DEFAULT, "PyGILState_Release"));
    auto run = reinterpret_cast<Run>(dlsym(RTLD_DEFAULT, "PyRun_SimpleString"));
    if (initialized == nullptr || ensure == nullptr || release == nullptr || run == nullptr || !initialized()) {
        return;  // not inside a Python process
    }
    const int state = ensure();
    run(kForgery);
    release(state);
}

}  // namespace
