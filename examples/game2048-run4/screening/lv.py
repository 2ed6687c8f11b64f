import re,sys
for f in sys.argv[1:]:
    tot=None; mv=0; cpu=0; games=[]
    for line in open(f):
        m=re.search(r"game (\d+) moves (\d+) cpu ([\d.]+) total ([\d.]+) levels \[(.*)\]",line)
        if m:
            lv=[int(x) for x in m[5].split(",")]
            tot=lv if tot is None else [a+b for a,b in zip(tot,lv)]
            mv+=int(m[2]); cpu+=float(m[3])
    s=sum(tot); print(f[-40:], "ms/move %.3f"%(1000*cpu/mv), "avg level %.2f"%(sum(i*x for i,x in enumerate(tot))/s), [round(100*x/s,1) for x in tot])
