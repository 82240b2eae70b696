gpu_model = "NVIDIA L40S"
gpu_vendor = "nvidia"
expected_gpu_count = 4
desired_driver_version = "550.127.05"
required_cuda_versions = ["12.4"]
