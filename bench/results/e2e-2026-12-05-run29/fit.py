#!/usr/bin/env python3
# Run 29: fits t = fixed + bytes / rate per kernel column over the K = 4096 projection shapes of one
# `ridge bench kernels --op gemm` log (N = 4096 … 28672, one M at a time; the bytes of a row are
# K · 2). Usage: python3 fit.py GEMM_LOG...
import re,sys
# least-squares fit t = a + N/(rate) over the K = 4096 shapes at one M, per kernel column
def parse(path):
    rows={}
    for line in open(path):
        m=re.match(r'(llama[23]-[78]b)\s+(\w+)\s+(\d+)\s+(\d+)\s+(\d+)\s+\|\s+([\d.]+)\s+([\d.]+)\s+[\d.]+\s+\|.*\|\s+(.*)$',line)
        if not m: continue
        model,layer,M,N,K,ours,cub,alt=m.groups()
        if K!='4096': continue
        d={'ours':float(ours),'cublas':float(cub)}
        toks=alt.split()
        for i in range(0,len(toks)-1,2):
            try: d[toks[i]]=float(toks[i+1])
            except: pass
        rows.setdefault(int(M),{})[int(N)]=d
    return rows
def fit(pts):
    n=len(pts); xs=[p[0] for p in pts]; ys=[p[1] for p in pts]
    mx=sum(xs)/n; my=sum(ys)/n
    b=sum((x-mx)*(y-my) for x,y in pts)/sum((x-mx)**2 for x in xs)
    return my-b*mx,b
for path in sys.argv[1:]:
    rows=parse(path)
    print(path)
    for M in sorted(rows):
        Ns=sorted(rows[M])
        for col in ['ours','cublas','window','window-bulk','window-dyn']:
            pts=[(N,rows[M][N][col]) for N in Ns if col in rows[M][N]]
            if len(pts)<3: continue
            a,b=fit(pts)
            rate=4096*2/ (b*1e-6) /1e12  # bytes per row / µs per row
            print(f"  M={M:<3} {col:<12} fixed {a:5.2f} us  streaming {rate:4.2f} TB/s  (N = {','.join(str(N) for N,_ in pts)})")
