"""``tapejit.profiler``: torch.profiler's ``profile(activities=[ProfilerActivity.CPU])`` and
``record_function``, over ``tapejit.autograd.profiler`` (only the CPU is profiled)."""
import enum
import warnings

from tapejit.autograd.profiler import record_function  # noqa: F401
from tapejit.autograd.profiler import profile as _autograd_profile


class ProfilerActivity(enum.Enum):
    CPU = 0
    XPU = 1
    MTIA = 2
    CUDA = 3
    HPU = 4
    PrivateUse1 = 5


class profile(_autograd_profile):
    """``with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:``;
    ``on_trace_ready(prof)`` is called when it stops.  Accelerator activities are dropped
    with torch's warning on a CPU-only build; a ``schedule`` (profiling some steps only)
    is not supported and raises."""

    def __init__(self, *, activities=None, schedule=None, on_trace_ready=None, record_shapes=False,
                 profile_memory=False, with_stack=False, with_flops=False, with_modules=False,
                 experimental_config=None, use_cuda=None, **kwargs):
        if schedule is not None:
            raise NotImplementedError("tapejit.profiler.profile: schedule= is not supported; profile the "
                                      "steps you want inside one `with profile()` block instead")
        if use_cuda or (activities is not None and ProfilerActivity.CUDA in list(activities)):
            warnings.warn("CUDA is not available, disabling CUDA profiling", UserWarning, stacklevel=2)
        super().__init__(record_shapes=record_shapes, profile_memory=profile_memory, with_stack=with_stack,
                         with_flops=with_flops, with_modules=with_modules)
        self.on_trace_ready = on_trace_ready

    def __exit__(self, *exc):
        super().__exit__(*exc)
        if self.on_trace_ready is not None:
            self.on_trace_ready(self)
        return False

    def start(self):
        self.__enter__()

    def stop(self):
        self.__exit__(None, None, None)

    def step(self):
        """A training step ends: nothing to do without a schedule."""
