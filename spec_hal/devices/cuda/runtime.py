from .._runtime import TorchDeviceRuntime

RUNTIME = TorchDeviceRuntime("cuda")
