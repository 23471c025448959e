exec(open('docs/experiments/detector-2026-12-01/fusion_eval.py').read())
TH=((0.8,0.6),(0.9,0.7),(0.95,0.75))
report('max(min, .9yam)', lambda c,h,y: np.maximum(np.minimum(c,h), 0.9*y), TH)
report('max(min, .9min(yam,head))', lambda c,h,y: np.maximum(np.minimum(c,h), 0.9*np.minimum(y,h)), TH)
report('max(min, .95min(yam,head))', lambda c,h,y: np.maximum(np.minimum(c,h), 0.95*np.minimum(y,h)), TH)
from scipy.special import expit, logit as lg
TH=((0.8,0.6),(0.9,0.7),(0.95,0.75),(0.98,0.85))
for beta in (1.0, 2.0, 3.0):
    report(f'min(cnn+{beta}, head)', lambda c,h,y: np.minimum(expit(lg(np.clip(c,1e-6,1-1e-6))+beta), h), TH)
from scipy.ndimage import maximum_filter1d
TH=((0.7,0.5),(0.8,0.6),(0.9,0.7),(0.95,0.75))
for w, floor in ((51, 0.3), (101, 0.3), (101, 0.5)):
    def f(c, h, y, w=w, floor=floor):
        m = maximum_filter1d(c, w, mode='nearest')
        return np.minimum(h, np.where(m >= floor, c / np.maximum(m, 1e-6), 0))
    report(f'min(head, cnn/localmax{w} if localmax>={floor})', f, TH)
from scipy.ndimage import maximum_filter1d
TH=((0.7,0.5),(0.8,0.6),(0.9,0.7))
for th, floor in ((0.97, 0.3), (0.99, 0.3), (0.99, 0.5)):
    def f(c, h, y, th=th, floor=floor):
        m = maximum_filter1d(c, 51, mode='nearest')
        return np.where((h >= th) & (m >= floor), c / np.maximum(m, 1e-6), np.minimum(c, h) * 0.5)
    report(f'head>={th} & localmax>={floor}: cnn/localmax', f, TH)
