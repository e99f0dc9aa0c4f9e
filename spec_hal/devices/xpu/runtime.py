from .._runtime import TorchDeviceRuntime

RUNTIME = TorchDeviceRuntime("xpu")
