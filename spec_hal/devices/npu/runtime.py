from .._runtime import TorchDeviceRuntime

RUNTIME = TorchDeviceRuntime("npu", extension="torch_npu")
