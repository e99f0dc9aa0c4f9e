from .._runtime import TorchDeviceRuntime

# ROCm builds of torch expose HIP through the torch.cuda module and the 'cuda' device type.
RUNTIME = TorchDeviceRuntime("cuda")
