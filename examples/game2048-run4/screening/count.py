import sys,importlib.util,time
sys.path.insert(0,'/work/wt/g2048r4/avo-target-game2048')
from avo_target_game2048 import engine
path, L, seeds = sys.argv[1], int(sys.argv[2]), [int(x) for x in sys.argv[3].split(',')]
s=importlib.util.spec_from_file_location('a',path); m=importlib.util.module_from_spec(s); s.loader.exec_module(m)
m.SOFT_S=m.LAST_S=1e9; m._level=lambda c:L
n=[0,0]; f=m._spawn_avg; e=m.evaluate
def g(*a):
    n[0]+=1; return f(*a)
def h(*a):
    n[1]+=1; return e(*a)
m._spawn_avg=g; m.evaluate=h
mv=0; sc=0; t=time.process_time()
for sd in seeds:
    game=engine.Game(seed=sd)
    while game.moves<2500 and not game.over(): game.play(m.choose_move(engine.to_grid(game.board)))
    mv+=game.moves; sc+=game.score
print(path, L, 'moves', mv, 'score', sc, 'leaf/move %.2f'%(n[0]/mv), 'eval/move %.2f'%(n[1]/mv), '%.3f ms'%(1000*(time.process_time()-t)/mv))
