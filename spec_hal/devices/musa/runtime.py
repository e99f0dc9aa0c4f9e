from .._runtime import TorchDeviceRuntime

RUNTIME = TorchDeviceRuntime("musa", extension="torch_musa")
