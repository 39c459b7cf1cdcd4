// The proxy-router actor: wiring only.
import { runActor } from '../../shared/actor.js';

await runActor('proxy-router', async () => ({}));
