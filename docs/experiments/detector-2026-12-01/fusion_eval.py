import pickle, sys, numpy as np
from training.head_data import StreamSet, reference_spans
from training.head_eval import spans_of, _f1
from analyzer.offline import event_counts, average_precision, recall_at_far
from analyzer.offline.evaluate import segment_counts
C = '/root/.cache/barkwatch/head/'
clean = StreamSet.load(C+'clean-644f499f7a67.npz'); scapes = StreamSet.load(C+'soundscapes-s1-644f499f7a67.npz')
CP, SP = pickle.load(open('/tmp/fusion_parts.pkl', 'rb'))
def report(name, f, TH, events=True):
    lab = np.array([m['is_dog'] for m in clean.meta]); sc = np.array([f(*CP[i]).max(initial=0) for i in range(len(clean.meta))])
    corp = np.array([m['source'].split('/')[0] for m in clean.meta])
    print(name, 'clip', round(average_precision(lab, sc), 4), 'R@2%', round(recall_at_far(lab, sc, .02)[0], 3),
          'extra', round(average_precision(lab[corp=='extra'], sc[corp=='extra']), 4), 'train', round(average_precision(lab[corp=='train'], sc[corp=='train']), 4), flush=True)
    if not events: return
    for on, off in TH:
        cnt = {}; fa = 0; hours = 0
        for i, m in enumerate(scapes.meta):
            s0, s1 = int(scapes.step_offsets[i]), int(scapes.step_offsets[i+1])
            est = spans_of(f(*SP[i]), on, off)
            if m['kind'] == 'confusers': fa += len(est); hours += m['duration_s']/3600; continue
            ref = reference_spans(scapes.step_labels[s0:s1], 0.5, 0.1)
            c = event_counts(ref, est, 0.25); g = segment_counts(ref, est, m['duration_s'])
            t = cnt.setdefault(m['snr_db'], [0]*6)
            for j, val in enumerate((c.tp, c.fp, c.fn, g.tp, g.fp, g.fn)): t[j] += val
        print(' ', on, off, ' '.join(f"{s:+.0f}:{_f1(*cnt[s][:3])}/{_f1(*cnt[s][3:])}" for s in sorted(cnt)), 'FA/h', round(fa/max(hours,1e-9), 2), flush=True)
