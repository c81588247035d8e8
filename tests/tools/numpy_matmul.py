# numpy_matmul.py N: N float64 matmuls of 384 x 384 matrices (numpy calls cblas_dgemm).
import sys

import numpy as np

rng = np.random.default_rng(1)
a = rng.standard_normal((384, 384))
b = rng.standard_normal((384, 384))
c = None
for _ in range(int(sys.argv[1])):
    c = a @ b
print("numpy_matmul: c[0, 0] = %.6f" % c[0, 0])
