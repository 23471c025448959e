"""One line per detector of judge_soundscapes.py reports (issue 39, sixteenth step): hit rate
by the bark's SNR (<-5 / -5..0 / 0..5 / 5+ dB), bouts of 5+ missed, segment P / R / F1, false
alarms on the dog scenes' beds, false alarms an hour on the confuser scene and the confuser
bouts scene, and the sustained barking scene's hit rate at 5+ dB and F1.

    python3 summary.py "NAME,NAME" FILE.json...
"""
import json,sys
want=sys.argv[1].split(',') if len(sys.argv)>1 and not sys.argv[1].endswith('.json') else None
files=[f for f in sys.argv[1:] if f.endswith('.json')]
for f in files:
    r=json.load(open(f)); print(f, r.get('sensor_cnn','bundled').split('/')[-2:], r['seconds'],'s')
    for name,k in r['detectors'].items():
        if want and name not in want: continue
        d=k['dogs' if 'dogs' in k else 'dog scenes']
        hr=' / '.join(f"{d[b][0]/max(d[b][1],1):.2f}" for b in ('barks -inf..-5 dB','barks -5..0 dB','barks 0..5 dB','barks 5..inf dB'))
        p,rc,f1=d['segment precision/recall/F1']
        c=k.get('confuser scene',{}).get('false alarms per hour'); cb=k.get('confuser bouts scene',{}).get('false alarms per hour')
        s=k.get('sustained barking scene',{})
        ss=f"{s['barks 5..inf dB'][0]/s['barks 5..inf dB'][1]:.2f} F1 {s['segment precision/recall/F1'][2]:.2f}" if s else '-'
        print(f"  {name:28s} hit {hr} | 5+ missed {d['bouts of 5+ missed'][0]}/{d['bouts of 5+ missed'][1]} | P/R/F1 {p:.2f}/{rc:.2f}/{f1:.3f} | bed FA {d['false alarms']} | FA/h conf {c} bouts {cb} | sustained 5+ {ss}")
