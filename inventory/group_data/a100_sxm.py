gpu_model = "NVIDIA A100-SXM4-80GB"
gpu_vendor = "nvidia"
expected_gpu_count = 8
desired_driver_version = "550.127.05"
required_cuda_versions = ["12.2", "12.4"]
