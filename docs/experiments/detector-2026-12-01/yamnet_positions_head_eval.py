import pickle, numpy as np
exec(open('docs/experiments/detector-2026-12-01/yamnet_positions_eval.py').read().split("TH = ((0.5")[0])
POSH, CLIP = pickle.load(open('/tmp/pos_head_scores.pkl', 'rb'))
for i in POS: POS[i] = (POS[i][0], POSH[i])
TH = ((0.5,0.3),(0.7,0.5),(0.8,0.6),(0.9,0.7),(0.95,0.75),(0.98,0.85),(0.99,0.9))
run('pos-head(trained) alone', lambda c,h,y,yp,hp: hp, TH)
run('min(cnn,pos-head)', lambda c,h,y,yp,hp: np.minimum(c, hp), TH)
run('min(cnn,head,pos-head)', lambda c,h,y,yp,hp: np.minimum(np.minimum(c, h), hp), TH[1:5])
