gpu_model = "AMD Instinct MI300X"
gpu_vendor = "amd"
expected_gpu_count = 8
